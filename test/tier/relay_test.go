package tier

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// relayTier is a tier whose followers relay to the leader through the
// leader's Link; it returns the tier, the leader's index and a follower's
// client address.
func relayTier(t *testing.T, args ...string) (*testenv.Tier, *testenv.Redis, int, string) {
	t.Helper()
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1, RelayLinks: true, Args: args})
	l := tr.Leader(t)
	return tr, master, l, tr.Nodes[followers(tr, l)[0]].Addr
}

// waitUntil polls cond every 20ms until it holds (bounded at 30s: it only
// ends a hang).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !within(30*time.Second, cond) {
		t.Fatalf("still not %s after 30s", what)
	}
}

// within reports whether cond became true within d.
func within(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

func lockInfo(t *testing.T, addr, resource string) testenv.LockInfo {
	t.Helper()
	li, err := testenv.ParseLockInfo(testenv.Dial(t, addr).Do("LOCK.INFO", resource))
	if err != nil {
		t.Fatal(err)
	}
	return li
}

// Issue 22, item 3. A grant after waiting in line, relayed by a follower,
// is judged by the lease left when the follower replies, counted from when
// the leader armed it: bob waits for r through a follower, the leader hands
// r to him when alice releases, his token is held up on the link back to
// the follower until his 1 s lease is over and carol has been granted r.
// Bob must not get that token (a lease that is over): -TRYAGAIN, or null.
func TestRelayedWaitGrantJudgedWhenReplied(t *testing.T) {
	tr, _, l, f := relayTier(t)
	leader := tr.Nodes[l].Addr
	if r := retry(t, leader, "LOCK.ACQUIRE", "r", "alice", "30000"); !isToken(r) {
		t.Fatalf("LOCK.ACQUIRE r alice = %s, want a token", testenv.ShowReply(r))
	}
	bob := testenv.Dial(t, f)
	bob.SetTimeout(60 * time.Second)
	bob.Send("LOCK.ACQUIRE", "r", "bob", "1000", "WAIT", "20000")
	bob.Flush()
	waitUntil(t, "bob waiting in line on the leader", func() bool { return lockInfo(t, leader, "r").Waiters == 1 })

	tr.RelayLinks[l].Cut(t, testenv.Downstream) // the leader's replies to the follower wait
	if r := testenv.Dial(t, leader).Do("LOCK.RELEASE", "r", "alice"); string(r) != ":1\r\n" {
		t.Fatalf("LOCK.RELEASE r alice = %s, want :1", testenv.ShowReply(r))
	}
	carol := testenv.Dial(t, leader)
	carol.SetTimeout(60 * time.Second)
	rc := carol.Do("LOCK.ACQUIRE", "r", "carol", "30000", "WAIT", "20000") // granted once bob's lease is over
	if !isToken(rc) {
		t.Fatalf("LOCK.ACQUIRE r carol WAIT = %s, want a token once bob's lease ran out", testenv.ShowReply(rc))
	}
	tr.RelayLinks[l].Heal(t) // bob's grant reaches the follower now
	rb, err := bob.ReadReply()
	if err != nil {
		t.Fatalf("bob's LOCK.ACQUIRE: %v", err)
	}
	if isToken(rb) {
		t.Fatalf("bob got token %s through the follower after carol was granted %s: a lease that was over when it was replied",
			testenv.ShowReply(rb), testenv.ShowReply(rc))
	}
	if !bytes.HasPrefix(rb, []byte("-TRYAGAIN")) && !testenv.IsNull(rb) {
		t.Fatalf("bob's late grant through the follower = %s, want -TRYAGAIN (or null)", testenv.ShowReply(rb))
	}
	if li := lockInfo(t, leader, "r"); string(li.Owner) != "carol" {
		t.Fatalf("LOCK.INFO r after bob's late grant: owner %q, want carol (the follower's undo must not touch her lease)", li.Owner)
	}
}

// Item 3, the undo: a relayed grant whose reply reaches the follower too
// late to hand on is undone on the leader, as a single node undoes a late
// grant, so the resource is not left held for a client that never learned
// of it. A safety margin of 0.9 makes "too late" a tenth of a 20 s lease.
func TestRelayedLateGrantIsUndone(t *testing.T) {
	tr, _, l, f := relayTier(t, "--lease-safety-margin", "0.9")
	leader := tr.Nodes[l].Addr
	u, r := lateRelayedGrant(t, tr, l, f, "alice", func(resource string) []string {
		return []string{"LOCK.ACQUIRE", resource, "alice", "20000"}
	})
	if !bytes.HasPrefix(r, []byte("-TRYAGAIN")) {
		t.Fatalf("alice's grant of %s that reached the follower with under the margin left = %s, want -TRYAGAIN", u, testenv.ShowReply(r))
	}
	if r := testenv.Dial(t, leader).Do("LOCK.ACQUIRE", u, "bob", "20000"); !isToken(r) {
		t.Fatalf("LOCK.ACQUIRE %s bob after alice's late grant was refused = %s, want a token (the late grant undone, not held for 20 s)",
			u, testenv.ShowReply(r))
	}
}

// lateRelayedGrantTries bounds lateRelayedGrant's fresh starts.
const lateRelayedGrantTries = 5

// lateRelayedGrant has the follower f relay request(resource), a grant of
// a 20 s lease to owner, with the leader's replies held on its Link until
// the leader has held the grant for a tenth of the lease (more than the
// 0.9 safety margin leaves to reply in); then it heals the Link and
// returns the resource and the client's reply, judged by the follower.
//
// Under load the request may never reach the leader, or the leader may
// refuse it: neither is the behaviour tested, so it starts again on a fresh
// resource (bounded). The follower relays on a pooled link, and its
// applied-index report (TIER.APPLIED, every second, and at once to a new
// leader: around the test's warm-up) takes one from the same pool; with
// the report's reply held by the cut, the request has to dial a link
// whose handshake reply is held too, and after its dial timeout the
// follower logs "cannot open a relay link to the leader" and answers that
// it could not relay (-TRYAGAIN; a recipe's "held, retry"): what CI saw as
// "still not alice's grant of u 2.5 s old on the leader after 30s". Any
// reply before the heal is the follower's own (the leader's cannot pass
// the cut), so it never passes for the judged one.
func lateRelayedGrant(t *testing.T, tr *testenv.Tier, l int, f, owner string, request func(resource string) []string) (string, []byte) {
	t.Helper()
	leader := tr.Nodes[l]
	for try := 1; try <= lateRelayedGrantTries; try++ {
		resource := "u" + strconv.Itoa(try)
		// A pooled relay link, and the leader's count of refusals so far.
		if r := retry(t, f, "LOCK.ACQUIRE", "warm"+strconv.Itoa(try), "dave", "30000"); !isToken(r) {
			t.Fatalf("LOCK.ACQUIRE warm dave via a follower = %s, want a token", testenv.ShowReply(r))
		}
		refused := refusedAcquires(t, leader)
		c := testenv.Dial(t, f)
		c.SetTimeout(60 * time.Second)
		tr.RelayLinks[l].Cut(t, testenv.Downstream)
		c.Send(request(resource)...)
		c.Flush()
		replied := readAsync(c)
		// The grant is on the leader; its reply waits on the link until a
		// tenth of the lease (and the drift allowance) has gone by.
		var early []byte
		what := owner + "'s grant of " + resource + " 2.5 s old on the leader"
		waitUntil(t, what, func() bool {
			select {
			case r := <-replied:
				if r.err != nil {
					t.Fatalf("%s via the follower: %v", testenv.ShowCommand(request(resource)), r.err)
				}
				early = r.reply
				return true
			default:
			}
			li := lockInfo(t, leader.Addr, resource)
			if string(li.Owner) == owner {
				return li.TTL < 17500
			}
			if refusedAcquires(t, leader) > refused {
				early = []byte("(the leader refused it)")
				return true
			}
			return false
		})
		tr.RelayLinks[l].Heal(t)
		if early == nil {
			r := <-replied
			if r.err != nil {
				t.Fatalf("%s via the follower: %v", testenv.ShowCommand(request(resource)), r.err)
			}
			return resource, r.reply
		}
		t.Logf("try %d: %s never reached the leader's grant (%s before the link healed: the follower could not relay it, "+
			"or the leader refused it, under load); trying again on a fresh resource",
			try, testenv.ShowCommand(request(resource)), testenv.ShowReply(early))
	}
	t.Fatalf("%s's relayed grant never reached the leader in %d tries", owner, lateRelayedGrantTries)
	return "", nil
}

type asyncReply struct {
	reply []byte
	err   error
}

// readAsync reads c's next reply on a goroutine of its own.
func readAsync(c *testenv.Conn) <-chan asyncReply {
	ch := make(chan asyncReply, 1)
	go func() {
		r, err := c.ReadReply()
		ch <- asyncReply{r, err}
	}()
	return ch
}

// refusedAcquires is the node's count of acquires answered other than
// granted (fenceproxy_lock_acquires_total), recipes' included.
func refusedAcquires(t *testing.T, p *testenv.Proxy) int {
	t.Helper()
	_, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/metrics")
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "fenceproxy_lock_acquires_total{") || strings.Contains(line, `result="granted"`) {
			continue
		}
		_, v, _ := strings.Cut(line, "} ")
		f, _ := strconv.ParseFloat(v, 64)
		n += int(f)
	}
	return n
}

// Issue 22, item 7. A relayed command whose reply is lost after the leader
// ran it has an unknown outcome: the client gets -ERR saying it may or may
// not have run, never -TRYAGAIN, which clients retry by themselves (the
// INCR would run twice). So too for an acquire.
func TestRelayedLostReplyIsNotRetryable(t *testing.T) {
	tr, master, l, f := relayTier(t)
	leader := tr.Nodes[l].Addr
	tok := retry(t, leader, "LOCK.ACQUIRE", "r", "alice", "60000")
	token, ok := testenv.ParseInt(tok)
	if !ok {
		t.Fatalf("LOCK.ACQUIRE r alice = %s, want a token", testenv.ShowReply(tok))
	}
	redis := testenv.Dial(t, master.Addr)
	c := testenv.Dial(t, f)
	c.SetTimeout(60 * time.Second)
	if r := retry(t, f, "FENCE.EXEC", "r", strconv.FormatInt(token, 10), "INCR", "ctr"); string(r) != ":1\r\n" {
		t.Fatalf("FENCE.EXEC r INCR ctr via a follower = %s, want :1", testenv.ShowReply(r))
	}
	for _, step := range []struct {
		args []string
		done func() bool // the leader has run it
	}{
		{[]string{"FENCE.EXEC", "r", strconv.FormatInt(token, 10), "INCR", "ctr"},
			func() bool { return string(redis.Do("GET", "ctr")) == "$1\r\n2\r\n" }},
		{[]string{"LOCK.ACQUIRE", "s", "bob", "60000"},
			func() bool { return string(lockInfo(t, leader, "s").Owner) == "bob" }},
	} {
		var r []byte
		for try := 1; ; try++ {
			// A relay connection open before the drop carries it (a new
			// one could not even be opened).
			if r := c.Do("LOCK.INFO", "r"); !bytes.HasPrefix(r, []byte("*")) {
				t.Fatalf("LOCK.INFO r via the follower = %s", testenv.ShowReply(r))
			}
			tr.RelayLinks[l].Drop(t, testenv.Downstream)
			c.Send(step.args...)
			c.Flush()
			ran := within(10*time.Second, step.done)
			tr.RelayLinks[l].Heal(t) // closes the link: the reply is lost
			var err error
			if r, err = c.ReadReply(); err != nil {
				t.Fatalf("%s via the follower: %v", testenv.ShowCommand(step.args), err)
			}
			if ran {
				break
			}
			// Never sent: the pooled link that carried LOCK.INFO was one
			// the previous Heal closed a moment later (its closes are
			// asynchronous), and a new one cannot be opened through the
			// drop. Not what this test is about: again.
			if try == 3 || !bytes.HasPrefix(r, []byte("-TRYAGAIN")) {
				t.Fatalf("still not run on the leader: %s (the follower answered %s)", testenv.ShowCommand(step.args), testenv.ShowReply(r))
			}
			t.Logf("try %d: %s never reached the leader (%s); again", try, testenv.ShowCommand(step.args), testenv.ShowReply(r))
		}
		if !bytes.HasPrefix(r, []byte("-ERR")) || !bytes.Contains(r, []byte("may or may not")) {
			t.Fatalf("%s via a follower whose link lost the leader's reply = %s, want -ERR … may or may not … (never -TRYAGAIN: clients retry it by themselves)",
				testenv.ShowCommand(step.args), testenv.ShowReply(r))
		}
	}
	if r := redis.Do("GET", "ctr"); string(r) != "$1\r\n2\r\n" {
		t.Fatalf("ctr = %s, want 2", testenv.ShowReply(r))
	}
}

// Item 7, the pool: a relay connection that died while idle (the link
// dropped it, or the leader restarted: its end closed) is not used for the
// next command, which must succeed, not fail with an unknown outcome.
func TestRelayRedialsADeadLink(t *testing.T) {
	tr, _, l, f := relayTier(t)
	c := testenv.Dial(t, f)
	c.SetTimeout(60 * time.Second)
	if r := retry(t, f, "LOCK.ACQUIRE", "warm", "dave", "30000"); !isToken(r) {
		t.Fatalf("LOCK.ACQUIRE warm dave via a follower = %s, want a token", testenv.ShowReply(r))
	}
	for i, kill := range []struct {
		what string
		do   func()
	}{
		{"the link dropped while idle", func() { tr.RelayLinks[l].Drop(t, testenv.BothWays); tr.RelayLinks[l].Heal(t) }},
		{"the leader restarted (its end of every relay connection closed)", func() { tr.RelayLinks[l].Restart(t) }},
	} {
		t.Run(kill.what, func(t *testing.T) {
			// A pooled connection has carried a command (the follower's
			// own reports run beside it).
			if r := c.Do("LOCK.INFO", "warm"); !bytes.HasPrefix(r, []byte("*")) {
				t.Fatalf("LOCK.INFO warm via the follower = %s", testenv.ShowReply(r))
			}
			kill.do()
			// The link closes its connections on goroutines of its own
			// after Heal or Restart returns: what the follower's pool can
			// see (a socket's end of file) reaches it a moment later. Let
			// it arrive first, or the command races it (CI, 2026-12-07,
			// on a loaded machine: the command went out on the dying
			// connection). Not a bound on anything measured.
			time.Sleep(200 * time.Millisecond)
			resource := "after" + strconv.Itoa(i)
			if r := c.Do("LOCK.ACQUIRE", resource, "erin", "30000"); !isToken(r) {
				t.Errorf("the first relayed command after %s: LOCK.ACQUIRE %s erin = %s, want a token",
					kill.what, resource, testenv.ShowReply(r))
			}
		})
	}
}
