package locking

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// The token authority (issue 12, item 4): a second fenceproxy with another
// fence store on one backend is refused, and losing either the fence store
// (an empty or restored data dir) or Redis's data alone never makes a token
// go back.

// authorityWait bounds the polls below: a killed proxy's heartbeat member
// expires within a few seconds; this only ends a hang.
const authorityWait = 30 * time.Second

const conflictText = "another fenceproxy with another fence store"

// token sends a lock command that must answer a token.
func token(t *testing.T, c *testenv.Conn, args ...string) int64 {
	t.Helper()
	r := c.Do(args...)
	n, ok := testenv.ParseInt(r)
	if !ok || n <= 0 {
		t.Fatalf("%s = %s, want a token", testenv.ShowCommand(args), testenv.ShowReply(r))
	}
	return n
}

// served polls until the proxy at addr grants LOCK.ACQUIRE resource owner
// (it may first refuse while another authority's heartbeat lives on) and
// returns the token.
func served(t *testing.T, addr, resource, owner string) int64 {
	t.Helper()
	var tok int64
	waitFor(t, authorityWait, "a token from "+addr, func() bool {
		c, err := testenv.TryDial(addr, 5*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		r, err := c.TryDo("LOCK.ACQUIRE", resource, owner, "60000")
		var ok bool
		tok, ok = testenv.ParseInt(r)
		return err == nil && ok && tok > 0
	})
	return tok
}

// TestSecondFenceStoreRefused: two fenceproxy processes with different data
// dirs in front of one Redis both refuse lock commands, with an error that
// says why, while both live; once one stops, the other serves again, and no
// token it grants is below one the other granted. (A second one started
// beside a live first does not start at all: test/operations'
// TestSecondProxyRefusesToStart. Both live at once here because the first
// was paused until its member ran out, and the second started meanwhile.)
func TestSecondFenceStoreRefused(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p1 := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c1 := testenv.Dial(t, p1.Addr)
	for i := range 5 {
		token(t, c1, "LOCK.ACQUIRE", "shared", "p1-"+strconv.Itoa(i), "60000")
		c1.Do("LOCK.RELEASE", "shared", "p1-"+strconv.Itoa(i))
	}
	held := token(t, c1, "LOCK.ACQUIRE", "shared", "holder", "60000")

	p1.Stop()
	p2 := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	p1.Cont()
	c2 := testenv.Dial(t, p2.Addr)
	refused := func(c *testenv.Conn, args ...string) bool {
		r, err := c.TryDo(args...)
		return err == nil && strings.HasPrefix(string(r), "-ERR fenceproxy: "+conflictText)
	}
	for _, c := range []*testenv.Conn{c1, c2} {
		waitFor(t, authorityWait, "lock commands refused by both proxies", func() bool {
			return refused(c, "LOCK.ACQUIRE", "fresh", "x", "60000")
		})
		for _, args := range [][]string{
			{"LOCK.RENEW", "shared", "holder", "60000"},
			{"FENCE.CHECK", "shared", strconv.FormatInt(held, 10)},
			{"FENCE.EXEC", "shared", strconv.FormatInt(held, 10), "SET", "data", "x"},
		} {
			if !refused(c, args...) {
				t.Fatalf("while two fence stores are live: %s = %s, want the conflict error",
					testenv.ShowCommand(args), testenv.ShowReply(c.Do(args...)))
			}
		}
		if r := c.Do("GET", "data"); !testenv.IsNull(r) {
			t.Fatalf("a refused FENCE.EXEC wrote: GET data = %s", testenv.ShowReply(r))
		}
		if r := c.Do("PING"); string(r) != "+PONG\r\n" {
			t.Fatalf("passthrough during the conflict: PING = %s", testenv.ShowReply(r))
		}
	}
	if v := infoField(c1.Do("INFO", "fenceproxy"), "token_authority_conflict"); v != "1" {
		t.Fatalf("INFO fenceproxy token_authority_conflict = %q during the conflict, want 1", v)
	}

	// p1 dies; p2 serves once p1's heartbeat has expired, above p1's tokens.
	p1.Kill9()
	c2.Do("LOCK.RELEASE", "shared", "holder") // p1's holder; a release is not refused
	tok2 := served(t, p2.Addr, "shared", "p2")
	if tok2 <= held {
		t.Fatalf("p2's first token %d after p1 granted %d", tok2, held)
	}
	if r := c2.Do("FENCE.CHECK", "shared", strconv.FormatInt(held, 10)); string(r) != ":0\r\n" {
		t.Fatalf("FENCE.CHECK of p1's last token through p2 = %s, want 0 (stale)", testenv.ShowReply(r))
	}
	c2.Do("LOCK.RELEASE", "shared", "p2")

	// p2 stops cleanly (its member leaves at once); p1 comes back and
	// serves above p2's tokens.
	if _, err := p2.Terminate(); err != nil {
		t.Fatal(err)
	}
	p1.Restart(t)
	if tok := served(t, p1.Addr, "shared", "p1-again"); tok <= tok2 {
		t.Fatalf("p1's token %d after p2 granted %d", tok, tok2)
	}
}

// TestEmptyDataDirKeepsTokensRising: a proxy grants tokens, is killed, and
// comes back on an EMPTY data dir while Redis still holds its owner
// records. The holder's retry never gets a lower token (nor is its record
// overwritten with one), FENCE.CHECK never calls an old token current after
// a new one was issued, and every new token is above every earlier one.
func TestEmptyDataDirKeepsTokensRising(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	var highest int64
	for i := range 20 {
		r := "res:" + strconv.Itoa(i%4)
		highest = token(t, c, "LOCK.ACQUIRE", r, "cycle", "60000")
		c.Do("LOCK.RELEASE", r, "cycle")
	}
	held := token(t, c, "LOCK.ACQUIRE", "held", "holder", "60000")
	highest = max(highest, held)
	p.Kill9()

	empty := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0,
		DataDir: filepath.Join(t.TempDir(), "empty")})
	first := served(t, empty.Addr, "probe", "after")
	c = testenv.Dial(t, empty.Addr)
	retry := token(t, c, "LOCK.ACQUIRE", "held", "holder", "60000")
	if retry < held {
		t.Fatalf("the holder's retry on the empty data dir got token %d, below its %d", retry, held)
	}
	rec, _ := testenv.ReadLockRecord(t, testenv.Dial(t, master.Addr), "fenceproxy:lock:{held}")
	if rec.Token != strconv.FormatInt(retry, 10) {
		t.Fatalf("the owner record's token = %q after the retry got %d", rec.Token, retry)
	}
	if retry != held {
		if r := c.Do("FENCE.CHECK", "held", strconv.FormatInt(held, 10)); string(r) != ":0\r\n" {
			t.Fatalf("FENCE.CHECK of the old token %d after %d was issued = %s, want 0", held, retry, testenv.ShowReply(r))
		}
	}
	if first <= highest {
		t.Fatalf("first token on the empty data dir = %d, not above %d granted before", first, highest)
	}
	for i := range 4 {
		r := "res:" + strconv.Itoa(i)
		if rr := c.Do("FENCE.CHECK", r, strconv.FormatInt(highest, 10)); string(rr) == ":1\r\n" {
			t.Fatalf("FENCE.CHECK %s %d (issued before the data dir was lost) = 1", r, highest)
		}
		if tok := token(t, c, "LOCK.ACQUIRE", r, "new", "60000"); tok <= highest {
			t.Fatalf("%s: token %d on the empty data dir, not above %d", r, tok, highest)
		}
	}
}

// TestRestoredBackupIssuesNoTokenTwice: the data dir is copied while the
// proxy is stopped, more tokens are granted, the copy is restored and the
// proxy restarted: no token already issued is handed out again, and a
// holder superseded after the backup cannot FENCE.EXEC with its token.
func TestRestoredBackupIssuesNoTokenTwice(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	stale := token(t, c, "LOCK.ACQUIRE", "doc", "alice", "60000")
	if _, err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	copyDir(t, p.DataDir, backup)

	p.Restart(t)
	c = testenv.Dial(t, p.Addr)
	issued := map[int64]bool{stale: true}
	c.Do("LOCK.RELEASE", "doc", "alice")
	current := token(t, c, "LOCK.ACQUIRE", "doc", "bob", "60000")
	issued[current] = true
	for i := range 10 {
		issued[token(t, c, "LOCK.ACQUIRE", "other:"+strconv.Itoa(i), "o", "60000")] = true
	}
	if _, err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(p.DataDir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, p.DataDir)
	p.Restart(t)

	var highest int64
	for tok := range issued {
		highest = max(highest, tok)
	}
	tokens := []int64{served(t, p.Addr, "fresh:0", "n")}
	c = testenv.Dial(t, p.Addr)
	for i := 1; i < 10; i++ {
		tokens = append(tokens, token(t, c, "LOCK.ACQUIRE", "fresh:"+strconv.Itoa(i), "n", "60000"))
	}
	for _, tok := range tokens {
		if issued[tok] || tok <= highest {
			t.Fatalf("after restoring the backup: token %d (issued before: %v; highest %d)", tok, issued[tok], highest)
		}
	}
	r := c.Do("FENCE.EXEC", "doc", strconv.FormatInt(stale, 10), "SET", "doc:data", "stale write")
	if !strings.HasPrefix(string(r), "-STALE") {
		t.Fatalf("alice's FENCE.EXEC with her token %d (bob's %d came later) after the restore = %s, want -STALE",
			stale, current, testenv.ShowReply(r))
	}
	if r := c.Do("GET", "doc:data"); !testenv.IsNull(r) {
		t.Fatalf("the stale FENCE.EXEC wrote: GET doc:data = %s", testenv.ShowReply(r))
	}
}

// copyDir copies a stopped proxy's data dir (a backup, or its restore).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v: %s", from, to, err, out)
	}
}

// TestRedisLossRewritesBound: Redis loses every key while the proxy runs;
// the token bound is written to it again (the heartbeat notices), and
// tokens keep rising.
func TestRedisLossRewritesBound(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c, direct := testenv.Dial(t, p.Addr), testenv.Dial(t, master.Addr)
	before := token(t, c, "LOCK.ACQUIRE", "r", "a", "60000")
	// The authority's keys live in Redis's highest database (15 here).
	const boundKey = "fenceproxy:lock:{authority}:bound"
	direct.Do("SELECT", "15")
	bound := func() int64 {
		b, _ := testenv.ParseBulk(direct.Do("HGET", boundKey, "bound"))
		n, _ := strconv.ParseInt(string(b), 10, 64)
		return n
	}
	waitFor(t, authorityWait, "the token bound in Redis", func() bool { return bound() >= before })
	was := bound()
	if r := direct.Do("FLUSHALL"); string(r) != "+OK\r\n" {
		t.Fatalf("FLUSHALL = %s", testenv.ShowReply(r))
	}
	waitFor(t, authorityWait, "the token bound rewritten in Redis after FLUSHALL", func() bool { return bound() >= was })
	if after := token(t, c, "LOCK.ACQUIRE", "r", "b", "60000"); after <= before {
		t.Fatalf("token %d after Redis lost its data, not above %d", after, before)
	}
}

// TestTokenFloorFlag: with --token-floor N the first token is above N, no
// token at or below N is current, the floor outlives a restart without the
// flag, and bad values are refused at start.
func TestTokenFloorFlag(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	const floor = 5_000_000
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0,
		Args: []string{"--token-floor", strconv.Itoa(floor)}})
	c := testenv.Dial(t, p.Addr)
	if tok := token(t, c, "LOCK.ACQUIRE", "f", "a", "60000"); tok <= floor {
		t.Fatalf("first token with --token-floor %d = %d", floor, tok)
	}
	if r := c.Do("FENCE.CHECK", "never-locked", strconv.Itoa(floor)); string(r) != ":0\r\n" {
		t.Fatalf("FENCE.CHECK of token %d (at the floor) = %s, want 0: it may have been issued before", floor, testenv.ShowReply(r))
	}
	if v, _ := strconv.ParseInt(infoField(c.Do("INFO", "fenceproxy"), "token_floor"), 10, 64); v < floor {
		t.Fatalf("INFO fenceproxy token_floor = %d, want at least %d", v, floor)
	}
	if _, err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	again := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0, DataDir: p.DataDir})
	if tok := token(t, testenv.Dial(t, again.Addr), "LOCK.ACQUIRE", "g", "a", "60000"); tok <= floor {
		t.Fatalf("token %d after a restart without --token-floor, not above %d", tok, floor)
	}
	for _, bad := range []string{"-1", "x", "9007199254740992", "9223372036854775807", "18446744073709551615"} {
		code, stderr := testenv.StartFails(t, "--backend", master.Addr, "--data-dir", t.TempDir(), "--token-floor", bad)
		if code == 0 || !strings.Contains(stderr, "token-floor") {
			t.Errorf("--token-floor %s: exit %d, stderr %q; want a refusal naming the flag", bad, code, stderr)
		}
	}
}

// TestNoReplicaAtStart: with --min-replicas 1 and the only replica stopped
// when the proxy starts, the token bound cannot be acknowledged: acquires
// get -NOREPLICAS (nothing granted), as a grant would, and are served once
// the replica is back.
func TestNoReplicaAtStart(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	replica.Stop()
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 200 * time.Millisecond})
	c := testenv.Dial(t, p.Addr)
	if r := c.Do("LOCK.ACQUIRE", "nr", "a", "60000"); !strings.HasPrefix(string(r), "-NOREPLICAS") {
		t.Fatalf("LOCK.ACQUIRE with the replica stopped since the start = %s, want -NOREPLICAS", testenv.ShowReply(r))
	}
	replica.Cont()
	served(t, p.Addr, "nr", "a")
}

// TestPausedProxyWaitsForItsHeartbeat: a proxy paused past its heartbeat's
// admission (a GC pause, a stalled VM) wakes with lock commands already
// read; they wait for the round it runs on waking instead of answering
// -TRYAGAIN. The loop's own FENCE.CHECK included.
func TestPausedProxyWaitsForItsHeartbeat(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	held := token(t, c, "LOCK.ACQUIRE", "paused-a", "x", "60000")

	p.Stop()
	// Past the last round's admission (two heartbeat intervals, 1 s).
	time.Sleep(1500 * time.Millisecond)
	acquire := acquireAsync(t, p.Addr, "LOCK.ACQUIRE", "paused-b", "y", "60000")
	check := acquireAsync(t, p.Addr, "FENCE.CHECK", "paused-a", strconv.FormatInt(held, 10))
	time.Sleep(100 * time.Millisecond) // both requests in the kernel's buffers
	p.Cont()

	if r := await(t, acquire, "LOCK.ACQUIRE after the pause"); r[0] != ':' {
		t.Errorf("LOCK.ACQUIRE read during a pause past the heartbeat = %s, want a token (the round on waking admits it)", testenv.ShowReply(r))
	}
	if r := await(t, check, "FENCE.CHECK after the pause"); string(r) != ":1\r\n" {
		t.Errorf("FENCE.CHECK of the current token read during the pause = %s, want 1", testenv.ShowReply(r))
	}
}
