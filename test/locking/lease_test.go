package locking

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// Guarantee 5 of the contract: no reply promises a lease that is over, and
// no reply carries a token FENCE.CHECK would call never issued; an outcome
// fenceproxy cannot know counts as issued. These tests make each of those
// replies happen on real processes: a replica stopped under a grant's WAIT,
// the proxy's Redis connections cut, the master or the proxy stopped.

// recordKey is the owner record of resource under the default key prefix.
func recordKey(resource string) string { return "fenceproxy:lock:{" + resource + "}" }

// waitWaits waits until n clients of master are blocked in WAIT (flags b,
// not merely last ran one): the proxy's lock writes, sent and waiting for a
// stopped replica.
func waitWaits(t *testing.T, master *testenv.Conn, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, strconv.Itoa(n)+" lock writes in WAIT on the master", func() bool {
		blocked := 0
		for _, l := range strings.Split(string(master.Do("CLIENT", "LIST")), "\n") {
			if strings.Contains(l, " flags=b ") && strings.Contains(l, " cmd=wait ") {
				blocked++
			}
		}
		return blocked >= n
	})
}

// waitWaitsOrReply waits until a lock write is in WAIT on the master
// (nil), or ch has a reply first (that reply).
func waitWaitsOrReply(t *testing.T, master *testenv.Conn, ch chan reply) []byte {
	t.Helper()
	var got []byte
	waitFor(t, 10*time.Second, "a lock write in WAIT on the master, or the reply", func() bool {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("LOCK.ACQUIRE: %v", r.err)
			}
			got = r.reply
			return true
		default:
		}
		for _, l := range strings.Split(string(master.Do("CLIENT", "LIST")), "\n") {
			if strings.Contains(l, " flags=b ") && strings.Contains(l, " cmd=wait ") {
				return true
			}
		}
		return false
	})
	return got
}

// waitGone waits until the master no longer holds key: the lease is over
// in Redis.
func waitGone(t *testing.T, master *testenv.Conn, key string) {
	t.Helper()
	waitFor(t, 10*time.Second, key+" expired on the master", func() bool {
		n, _ := testenv.ParseInt(master.Do("EXISTS", key))
		return n == 0
	})
}

// acquireAsync sends args on a connection of its own and returns the reply
// when it comes.
func acquireAsync(t *testing.T, addr string, args ...string) chan reply {
	c := testenv.Dial(t, addr)
	c.SetTimeout(30 * time.Second)
	out := make(chan reply, 1)
	go func() {
		r, err := c.TryDo(args...)
		out <- reply{reply: r, err: err}
	}()
	return out
}

func await(t *testing.T, ch chan reply, what string) []byte {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.reply
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no reply within 30s", what)
	}
	return nil
}

// leaseSetup is a master with one replica and a proxy with --min-replicas
// 1 and replicaTimeout, with a connection to each (m to the master).
type leaseSetup struct {
	master, replica *testenv.Redis
	p               *testenv.Proxy
	c, m            *testenv.Conn
}

func newLeaseSetup(t *testing.T, replicaTimeout time.Duration, args ...string) leaseSetup {
	t.Helper()
	var e leaseSetup
	e.master = testenv.StartRedis(t, testenv.RedisOptions{})
	e.replica = testenv.StartReplica(t, e.master)
	e.p = testenv.StartProxy(t, testenv.ProxyOptions{Backend: e.master.Addr, MinReplicas: 1, ReplicaTimeout: replicaTimeout, Args: args})
	e.c = testenv.Dial(t, e.p.Addr)
	e.c.SetTimeout(30 * time.Second)
	e.m = testenv.Dial(t, e.master.Addr)
	return e
}

// expiredHolder has A acquire r for 100ms and waits until the lease ran
// out in Redis; it returns A's token.
func (e leaseSetup) expiredHolder(t *testing.T, r string) int64 {
	t.Helper()
	var a int64
	for attempt := 1; ; attempt++ {
		got := e.c.Do("LOCK.ACQUIRE", r, "A", "100")
		var ok bool
		if a, ok = testenv.ParseInt(got); ok {
			break
		}
		// A 100 ms lease leaves the reply about 48 ms: on a loaded
		// machine (CI, -race) the grant can be later than that, and is
		// then undone and refused (-TRYAGAIN), which is right. So is the
		// token authority's refusal while its heartbeat to Redis catches
		// up after a stopped replica came back (CI, once: ten attempts
		// back to back all met it), so attempts are paced, for at most
		// about 10s.
		if attempt == 100 || !strings.HasPrefix(string(got), "-TRYAGAIN") {
			t.Fatalf("A's LOCK.ACQUIRE %s for 100 ms = %q, want a token", r, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitGone(t, e.m, recordKey(r))
	return a
}

// expectUnknown fails unless got is the may-or-may-not-be-granted error.
func expectUnknown(t *testing.T, got []byte, what string) {
	t.Helper()
	if _, isToken := testenv.ParseInt(got); isToken || !strings.Contains(string(got), "may or may not") {
		t.Fatalf("%s = %q, want the may-or-may-not-be-granted error", what, got)
	}
}

// checkNoContradiction is the reviewer's check after an unknown outcome:
// the earlier holder's token is never current again once a newer owner's
// record may stand, and no token the newer owner's renewal replies is
// called never issued.
func checkNoContradiction(t *testing.T, c *testenv.Conn, r string, stale int64, owner string) {
	t.Helper()
	// Right after the cut (or the stop) the proxy may still be
	// reconnecting, or waiting for its token authority's heartbeat.
	do := func(args ...string) []byte {
		var got []byte
		waitFor(t, 10*time.Second, "the proxy serving lock commands again", func() bool {
			got = c.Do(args...)
			return !strings.HasPrefix(string(got), "-TRYAGAIN")
		})
		return got
	}
	renewed := do("LOCK.RENEW", r, owner, "10000")
	if tok, ok := testenv.ParseInt(renewed); ok {
		if got := do("FENCE.CHECK", r, strconv.FormatInt(tok, 10)); string(got) != ":1\r\n" {
			t.Errorf("LOCK.RENEW %s %s replied token %d, then FENCE.CHECK of it = %q, want 1", r, owner, tok, got)
		}
	} else if !testenv.IsNull(renewed) {
		t.Errorf("LOCK.RENEW %s %s = %q, want the token or null", r, owner, renewed)
	}
	if got := do("FENCE.CHECK", r, strconv.FormatInt(stale, 10)); string(got) != ":0\r\n" {
		t.Errorf("FENCE.CHECK of the expired holder's token %d after another owner's grant of unknown outcome = %q, want 0 (its record may stand)", stale, got)
	}
	if got := do("FENCE.EXEC", r, strconv.FormatInt(stale, 10), "SET", "fenced:"+r, "stale"); !strings.HasPrefix(string(got), "-STALE") {
		t.Errorf("the expired holder's FENCE.EXEC = %q, want -STALE", got)
	}
}

// TestCutDuringWaitCountsAsIssued is the outside review's scenario: A's
// lease has run out, B's grant waits in WAIT for a stopped replica, and
// the proxy's connections to Redis are cut. B is told the outcome is
// unknown, and its record {B, token} stays in Redis. From then on B's
// token must count as issued: B's renewal may reply it, FENCE.CHECK calls
// it current, and A's token is stale.
func TestCutDuringWaitCountsAsIssued(t *testing.T) {
	e := newLeaseSetup(t, 10*time.Second)
	// B's script must be in WAIT when the connections are cut. On a
	// loaded machine the proxy can refuse B before sending it (its token
	// authority's heartbeat lapsed while the replica was stopped: seen
	// once in CI): also right, as nothing was done; then try again on a
	// fresh resource.
	var r string
	var a int64
	var b chan reply
	for attempt := 1; ; attempt++ {
		r = "cut/wait/" + strconv.Itoa(attempt)
		a = e.expiredHolder(t, r)
		e.replica.Stop()
		b = acquireAsync(t, e.p.Addr, "LOCK.ACQUIRE", r, "B", "60000")
		if refused := waitWaitsOrReply(t, e.m, b); refused == nil {
			break
		} else if attempt == 5 || !strings.HasPrefix(string(refused), "-TRYAGAIN") || !strings.Contains(string(refused), "nothing was done") {
			t.Fatalf("B's LOCK.ACQUIRE with the replica stopped = %q before any WAIT, want it to wait for the replica", refused)
		}
		e.replica.Cont()
		e.master.WaitReplicas(t, 1)
	}
	if got := string(e.m.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")); !strings.HasPrefix(got, ":") {
		t.Fatalf("CLIENT KILL = %q", got)
	}
	expectUnknown(t, await(t, b, "B's LOCK.ACQUIRE"), "B's LOCK.ACQUIRE whose WAIT was cut")
	e.replica.Cont()
	e.master.WaitReplicas(t, 1)
	if n, _ := testenv.ParseInt(e.m.Do("EXISTS", recordKey(r))); n != 1 {
		t.Fatalf("B's record is not in Redis (EXISTS = %d): the scenario did not happen", n)
	}
	checkNoContradiction(t, e.c, r, a, "B")
}

// TestLostScriptReplyCountsAsIssued: the grant's script itself is left
// unanswered (the master stopped past the lock connection's reply
// timeout, and it runs the script once resumed), so the proxy cannot know
// whether it granted. Its token must count as issued all the same.
func TestLostScriptReplyCountsAsIssued(t *testing.T) {
	// The lock connections give up on a reply after the replica timeout
	// plus 2s.
	e := newLeaseSetup(t, 100*time.Millisecond)
	// B's script must reach the master before it stops. Now and then
	// something else is in flight on the one lock connection then (seen
	// 1 run in 8 under -race), B waits behind it, the heartbeat lapses,
	// and B is refused before its script is sent: also right, provided
	// nothing was done. Try again on a fresh resource until the script
	// was sent.
	var r string
	var a int64
	for attempt := 1; ; attempt++ {
		r = "cut/script/" + strconv.Itoa(attempt)
		a = e.expiredHolder(t, r)
		e.master.Stop()
		got, err := e.c.TryDo("LOCK.ACQUIRE", r, "B", "60000")
		e.master.Cont()
		if err != nil {
			t.Fatalf("B's LOCK.ACQUIRE: %v", err)
		}
		if !strings.HasPrefix(string(got), "-TRYAGAIN") || !strings.Contains(string(got), "nothing was done") || attempt == 5 {
			expectUnknown(t, got, "B's LOCK.ACQUIRE with the master stopped")
			break
		}
		// Refused before it was sent: B must not hold r once the master
		// runs again.
		waitFor(t, 10*time.Second, "the proxy serving lock commands again", func() bool {
			return !strings.HasPrefix(string(e.c.Do("FENCE.CHECK", r, "1")), "-TRYAGAIN") // admitted, as LOCK.ACQUIRE is
		})
		if rec, _ := testenv.ReadLockRecord(t, e.m, recordKey(r)); rec.Owner == "B" {
			t.Fatalf("B's LOCK.ACQUIRE was answered %q, yet B's record is in Redis", got)
		}
		t.Logf("attempt %d: B was refused before its script was sent; again", attempt)
	}
	// The master ran the script it had read once it was resumed.
	waitFor(t, 10*time.Second, "B's record in Redis", func() bool {
		rec, _ := testenv.ReadLockRecord(t, e.m, recordKey(r))
		return rec.Owner == "B"
	})
	checkNoContradiction(t, e.c, r, a, "B")
}

// TestLateGrantIsUndone: with the replica stopped for longer than the
// lease (and --replica-timeout above it), a grant's acknowledgements come
// after its lease ran out in Redis. It must be answered -TRYAGAIN and
// leave nothing held: another owner gets the resource at once.
func TestLateGrantIsUndone(t *testing.T) {
	e := newLeaseSetup(t, 10*time.Second)
	master, replica, p, c, m := e.master, e.replica, e.p, e.c, e.m
	const r = "late/grant"

	replica.Stop()
	b := acquireAsync(t, p.Addr, "LOCK.ACQUIRE", r, "B", "1000")
	// B's record first: the token authority's heartbeat may be in WAIT
	// too, and waitGone alone would pass before B's script ran.
	waitFor(t, 10*time.Second, "B's record on the master", func() bool {
		n, _ := testenv.ParseInt(m.Do("EXISTS", recordKey(r)))
		return n == 1
	})
	waitWaits(t, m, 1)
	waitGone(t, m, recordKey(r)) // B's lease is over in Redis
	replica.Cont()
	if got := await(t, b, "B's LOCK.ACQUIRE"); !strings.HasPrefix(string(got), "-TRYAGAIN") {
		t.Fatalf("a grant acknowledged after its lease ran out = %q, want -TRYAGAIN", got)
	}
	master.WaitReplicas(t, 1)
	tok, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", r, "C", "10000"))
	if !ok {
		t.Fatal("C got no token right after the late grant was refused: something is held")
	}
	if li := lockInfo(t, c, r); string(li.Owner) != "C" || li.Token != tok {
		t.Fatalf("LOCK.INFO after C's grant: owner %q token %d, want C and %d", li.Owner, li.Token, tok)
	}
}

// TestLateRenewalIsRefused: the same for LOCK.RENEW. Its re-arm cannot be
// undone, but it must not be replied as a fresh lease.
func TestLateRenewalIsRefused(t *testing.T) {
	e := newLeaseSetup(t, 10*time.Second)
	replica, p, c, m := e.replica, e.p, e.c, e.m
	const r = "late/renew"

	if _, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", r, "A", "300")); !ok {
		t.Fatal("A got no token")
	}
	replica.Stop()
	renew := acquireAsync(t, p.Addr, "LOCK.RENEW", r, "A", "300")
	waitWaits(t, m, 1)
	waitGone(t, m, recordKey(r))
	replica.Cont()
	if got := await(t, renew, "A's LOCK.RENEW"); !strings.HasPrefix(string(got), "-TRYAGAIN") {
		t.Fatalf("a renewal acknowledged after its lease ran out = %q, want -TRYAGAIN", got)
	}
}

// TestProxyStoppedPastTheLease: requests the proxy had read when it was
// SIGSTOPped (they wait in WAIT for a stopped replica, so they certainly
// had) are answered only after their leases ran out in Redis. Every one
// must get -TRYAGAIN, and nothing stays held.
func TestProxyStoppedPastTheLease(t *testing.T) {
	e := newLeaseSetup(t, 10*time.Second, "--lock-conns", "4")
	master, replica, p, c, m := e.master, e.replica, e.p, e.c, e.m
	// The renewal first, while A's lease is still on.
	resources := []string{"stop/renewed", "stop/0", "stop/1", "stop/2"}
	renewed := resources[0]
	if got := c.Do("LOCK.ACQUIRE", renewed, "A", "300"); got[0] != ':' {
		t.Fatalf("A's LOCK.ACQUIRE = %q, want a token", got)
	}

	armedAt := func(r string) string {
		rec, _ := testenv.ReadLockRecord(t, m, recordKey(r))
		return rec.Renewed
	}
	before := armedAt(renewed)

	replica.Stop()
	var replies []chan reply
	for _, r := range resources {
		// One at a time, each on a lock connection of its own, each seen
		// written on the master (its WAIT then waits for the stopped
		// replica): read by the proxy before it stops. Counting WAITs on
		// the master is no proof of that: a stray one (an EVALSHA that met
		// NOSCRIPT had its batch's WAIT behind it) made this test stop the
		// proxy before stop/2 was read, which then got a fresh grant.
		args := []string{"LOCK.ACQUIRE", r, "B", "300"}
		if r == renewed {
			args = []string{"LOCK.RENEW", r, "A", "300"}
		}
		replies = append(replies, acquireAsync(t, p.Addr, args...))
		waitFor(t, 10*time.Second, r+"'s script on the master", func() bool {
			if r == renewed {
				return armedAt(r) != before
			}
			rec, _ := testenv.ReadLockRecord(t, m, recordKey(r))
			return rec.Owner == "B"
		})
	}
	p.Stop()
	replica.Cont()
	for _, r := range resources {
		waitGone(t, m, recordKey(r))
	}
	p.Cont()
	for i, ch := range replies {
		if got := await(t, ch, resources[i]); !strings.HasPrefix(string(got), "-TRYAGAIN") {
			t.Errorf("%s: reply after the proxy was stopped past the lease = %q, want -TRYAGAIN", resources[i], got)
		}
	}
	master.WaitReplicas(t, 1)
	for _, r := range resources {
		if li := lockInfo(t, c, r); li.Owner != nil {
			t.Errorf("LOCK.INFO %s after the late replies: held by %q, want free", r, li.Owner)
		}
	}
}
