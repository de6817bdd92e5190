package tier

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// The token authority in a tier (issue 14): the leader runs the heartbeat
// under the tier's id, shares the tier's bound with Redis, and a single
// fenceproxy with another fence store on the same backend and key prefix
// is refused and refuses, both ways; tier nodes are each other's peers.

const (
	boundKey     = "fenceproxy:lock:{authority}:bound"
	liveKey      = "fenceproxy:lock:{authority}:live"
	conflictText = "another fenceproxy with another fence store"
	// authorityWait bounds the polls below: a killed process's member
	// expires within a few seconds; this only ends a hang.
	authorityWait = 60 * time.Second
)

// dialKeysDB is a connection to Redis at addr in the database of the
// authority's keys: the highest (15 of the 16 testenv's Redis has).
func dialKeysDB(t *testing.T, addr string) *testenv.Conn {
	t.Helper()
	c := testenv.Dial(t, addr)
	if r := c.Do("SELECT", "15"); string(r) != "+OK\r\n" {
		t.Fatalf("SELECT 15 = %s", testenv.ShowReply(r))
	}
	return c
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(authorityWait)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %v: %s", authorityWait, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisBound is the token bound in Redis and who raised it ("store").
func redisBound(t *testing.T, direct *testenv.Conn) (uint64, string) {
	t.Helper()
	r := direct.Do("HMGET", boundKey, "bound", "store")
	parts := bytes.Split(r, []byte("\r\n"))
	if len(parts) < 5 || !bytes.HasPrefix(parts[1], []byte("$")) {
		return 0, ""
	}
	b, _ := strconv.ParseUint(string(parts[2]), 10, 64)
	return b, string(parts[4])
}

// acquire sends LOCK.ACQUIRE until it answers a token (bounded).
func acquire(t *testing.T, addr, resource, owner string) int64 {
	t.Helper()
	return acquireUnless(t, addr, resource, owner, "")
}

// acquireUnless is acquire, failing the test if a reply starts with
// refusal (unless refusal is empty).
func acquireUnless(t *testing.T, addr, resource, owner, refusal string) int64 {
	t.Helper()
	var tok int64
	waitFor(t, "a token for "+owner+" via "+addr, func() bool {
		c, err := testenv.TryDial(addr, 5*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		r, err := c.TryDo("LOCK.ACQUIRE", resource, owner, "60000")
		if refusal != "" && strings.HasPrefix(string(r), refusal) {
			t.Fatalf("LOCK.ACQUIRE via %s: %s", addr, testenv.ShowReply(r))
		}
		var ok bool
		tok, ok = testenv.ParseInt(r)
		return err == nil && ok && tok > 0
	})
	return tok
}

// refused reports whether a lock command via addr gets the conflict error.
func refused(addr string, args ...string) bool {
	c, err := testenv.TryDial(addr, 5*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	r, err := c.TryDo(args...)
	return err == nil && strings.HasPrefix(string(r), "-ERR fenceproxy: "+conflictText)
}

func infoField(addr, section, field string) string {
	c, err := testenv.TryDial(addr, 5*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	r, err := c.TryDo("INFO", section)
	if err != nil {
		return ""
	}
	return infoFieldOf(r, field)
}

// infoFieldOf is field's value in an INFO reply, "" if it has none.
func infoFieldOf(r []byte, field string) string {
	for _, line := range strings.Split(string(r), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// The tier's bound is in Redis, raised by the tier (its id), above every
// token the tier granted; the leader's INFO shows the authority confirmed
// under the tier's id; a new leader (the old one killed) takes over the
// heartbeat without taking the old one's member for a conflict, and its
// tokens are above the old ones and under the bound in Redis.
func TestTierSharesItsBoundWithRedis(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1})
	direct := dialKeysDB(t, master.Addr)
	l := tr.Leader(t)
	tierID := testenv.TierInfo(tr.Nodes[l].Addr)["tier_id"]
	var last int64
	for i := range 10 {
		last = acquire(t, tr.Nodes[(l+i)%3].Addr, fmt.Sprintf("b%d", i), "o")
	}
	bound, store := redisBound(t, direct)
	if bound < uint64(last) || store != tierID {
		t.Fatalf("the bound in Redis is %d raised by %q; want at least %d, raised by the tier %q", bound, store, last, tierID)
	}
	if id := infoField(tr.Nodes[l].Addr, "fenceproxy", "token_authority_id"); id != tierID {
		t.Fatalf("the leader's token_authority_id is %q, want the tier id %q", id, tierID)
	}
	if ok := infoField(tr.Nodes[l].Addr, "fenceproxy", "token_authority_confirmed"); ok != "1" {
		t.Fatalf("the leader's token_authority_confirmed is %q, want 1", ok)
	}

	tr.Nodes[l].Kill9()
	nl := tr.Leader(t)
	tok := acquire(t, tr.Nodes[nl].Addr, "after", "o")
	if tok <= last {
		t.Fatalf("the new leader's token %d is not above %d", tok, last)
	}
	if c := infoField(tr.Nodes[nl].Addr, "fenceproxy", "token_authority_conflict"); c != "0" {
		t.Fatalf("the new leader sees a conflict (token_authority_conflict %q): the old leader's member is a peer", c)
	}
	if bound, _ := redisBound(t, direct); bound < uint64(tok) {
		t.Fatalf("the bound in Redis (%d) is below the new leader's token %d", bound, tok)
	}
}

// A single fenceproxy with its own fence store on the tier's backend and key
// prefix does not start while the tier serves; if both are live all the
// same (the tier paused until its leader's member ran out, the stray
// started meanwhile), both refuse lock commands (through any tier node). Once it stops, the tier serves above its tokens; once the tier is
// gone (kill -9 of every node), it serves above every tier token; and the
// tier, restarted, serves above its tokens again.
func TestStrayFenceStoreRefusedBothWays(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1})
	l := tr.Leader(t)
	var highest int64
	for i := range 5 {
		highest = max(highest, acquire(t, tr.Nodes[l].Addr, "shared", fmt.Sprintf("t%d", i)))
		testenv.Dial(t, tr.Nodes[l].Addr).Do("LOCK.RELEASE", "shared", fmt.Sprintf("t%d", i))
	}

	strayRefusedToStart(t, master.Addr)
	for _, n := range tr.Nodes {
		n.Stop()
	}
	stray := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1})
	for _, n := range tr.Nodes {
		n.Cont()
	}
	l = tr.Leader(t)
	for _, addr := range []string{stray.Addr, tr.Nodes[l].Addr, tr.Nodes[(l+1)%3].Addr} {
		waitFor(t, "lock commands refused via "+addr, func() bool {
			return refused(addr, "LOCK.ACQUIRE", "fresh", "x", "60000")
		})
		if !refused(addr, "FENCE.CHECK", "shared", strconv.FormatInt(highest, 10)) {
			t.Fatalf("FENCE.CHECK via %s while a stray fence store is live: not refused", addr)
		}
		if r := testenv.Dial(t, addr).Do("PING"); string(r) != "+PONG\r\n" {
			t.Fatalf("passthrough via %s during the conflict: PING = %s", addr, testenv.ShowReply(r))
		}
	}
	if v := infoField(tr.Nodes[l].Addr, "fenceproxy", "token_authority_conflict"); v != "1" {
		t.Fatalf("the leader's token_authority_conflict = %q during the conflict, want 1", v)
	}

	// The stray stops cleanly: the tier serves again, above anything.
	if _, err := stray.Terminate(); err != nil {
		t.Fatal(err)
	}
	tok := acquire(t, tr.Nodes[(l+2)%3].Addr, "shared", "tier-again")
	if tok <= highest {
		t.Fatalf("the tier's token %d after the stray stopped, not above %d", tok, highest)
	}
	highest = tok

	// The tier goes; the stray comes back on its data dir: it adopts the
	// tier's bound in Redis, so its tokens are above the tier's.
	for _, n := range tr.Nodes {
		n.Kill9()
	}
	stray.Restart(t)
	st := acquire(t, stray.Addr, "stray-only", "s")
	if st <= highest {
		t.Fatalf("the stray's token %d after the tier went, not above the tier's %d", st, highest)
	}
	if r := testenv.Dial(t, stray.Addr).Do("FENCE.CHECK", "shared", strconv.FormatInt(highest, 10)); string(r) == ":1\r\n" {
		t.Fatalf("the stray calls the tier's last token %d current: it cannot know it", highest)
	}

	// And back: the stray stops, the tier restarts and serves above it.
	if _, err := stray.Terminate(); err != nil {
		t.Fatal(err)
	}
	for _, n := range tr.Nodes {
		n.Restart(t)
	}
	nl := tr.Leader(t)
	if tok := acquire(t, tr.Nodes[nl].Addr, "tier-back", "t"); tok <= st {
		t.Fatalf("the restarted tier's token %d, not above the stray's %d", tok, st)
	}
}

// strayRefusedToStart: a single fenceproxy with a fence store of its own
// does not start in front of a live tier's backend.
func strayRefusedToStart(t *testing.T, backend string) {
	t.Helper()
	code, stderr := testenv.StartFails(t, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--min-replicas", "1",
		"--backend", backend, "--data-dir", t.TempDir())
	if code == 0 || !strings.Contains(stderr, conflictText) {
		t.Fatalf("a stray fenceproxy beside a live tier: exit %d, stderr %q; want a refusal to start naming the tier's store", code, stderr)
	}
}

// Redis loses every key while the tier runs: the leader writes the tier's
// bound again, tokens keep rising, and a single fenceproxy started later on
// an empty data dir (refused while the tier lives) starts above every tier
// token once the tier is gone.
func TestRedisLossNeverRegressesTierTokens(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1})
	direct := dialKeysDB(t, master.Addr)
	l := tr.Leader(t)
	before := acquire(t, tr.Nodes[l].Addr, "r", "a")
	waitFor(t, "the bound in Redis", func() bool { b, _ := redisBound(t, direct); return b >= uint64(before) })
	was, _ := redisBound(t, direct)
	if r := direct.Do("FLUSHALL"); string(r) != "+OK\r\n" {
		t.Fatalf("FLUSHALL = %s", testenv.ShowReply(r))
	}
	waitFor(t, "the tier's bound written to Redis again after FLUSHALL", func() bool {
		b, _ := redisBound(t, direct)
		return b >= was
	})
	after := acquire(t, tr.Nodes[(l+1)%3].Addr, "r", "b")
	if after <= before {
		t.Fatalf("token %d after Redis lost its data, not above %d", after, before)
	}

	strayRefusedToStart(t, master.Addr)
	for _, n := range tr.Nodes {
		n.Kill9()
	}
	stray := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1})
	if tok := acquire(t, stray.Addr, "stray", "s"); tok <= after {
		t.Fatalf("the stray's token %d after the tier went, not above the tier's %d", tok, after)
	}
}

// Tier nodes see each other's members as peers: with every node leading in
// turn (the leader stopped cleanly each time, so its member leaves, or
// killed, so it stays live for a few seconds), a new leader never refuses
// a lock command for a conflict and no node ever reports one.
func TestLeaderChangesKeepTheAuthority(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1})
	direct := dialKeysDB(t, master.Addr)
	var last int64
	for round := range 4 {
		l := tr.Leader(t)
		tok := acquireUnless(t, tr.Nodes[l].Addr, fmt.Sprintf("turn%d", round), "o", "-ERR fenceproxy: "+conflictText)
		if tok <= last {
			t.Fatalf("round %d: token %d after %d", round, tok, last)
		}
		last = tok
		for i, n := range tr.Nodes {
			if c := infoField(n.Addr, "fenceproxy", "token_authority_conflict"); c == "1" {
				t.Fatalf("round %d: node %s reports a conflict", round, tr.IDs[i])
			}
		}
		members := direct.Do("ZRANGE", liveKey, "0", "-1")
		if !bytes.Contains(members, []byte(tr.IDs[l]+"@")) {
			t.Fatalf("round %d: the live set %s has no member of the leader %s", round, testenv.ShowReply(members), tr.IDs[l])
		}
		if round%2 == 0 {
			if _, err := tr.Nodes[l].Terminate(); err != nil {
				t.Fatal(err)
			}
		} else {
			tr.Nodes[l].Kill9()
		}
		tr.Leader(t)
		tr.Nodes[l].Restart(t)
	}
}
