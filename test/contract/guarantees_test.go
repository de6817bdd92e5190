package contract_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// tokenLog records, per resource, the greatest token any reply carried.
type tokenLog struct {
	mu    sync.Mutex
	max   map[string]int64
	count int
}

func (l *tokenLog) add(resource string, tok int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max == nil {
		l.max = map[string]int64{}
	}
	l.max[resource] = max(l.max[resource], tok)
	l.count++
}

func (l *tokenLog) grants() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

func (l *tokenLog) get(resource string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max[resource]
}

// churn runs workers goroutines, each on its own connection, that acquire
// and release random resources with short leases until stop is closed, a
// request fails (the proxy went away) or maxOps requests were made. Every
// token a reply carries is logged. It returns when every worker is done,
// with the protocol violations seen (not I/O errors: those end a worker).
func churn(conns []*testenv.Conn, resources []string, log *tokenLog, stop <-chan struct{}, maxOps int, seed uint64) []error {
	var mu sync.Mutex
	var bad []error
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			owner := fmt.Sprintf("worker-%d-%d", seed, i)
			for range maxOps {
				select {
				case <-stop:
					return
				default:
				}
				r := resources[rng.IntN(len(resources))]
				ttl := itoa(int64(50 + rng.IntN(250)))
				reply, err := c.TryDo("LOCK.ACQUIRE", r, owner, ttl)
				if err != nil {
					return
				}
				if testenv.IsNull(reply) {
					continue
				}
				tok, ok := testenv.ParseInt(reply)
				if !ok || tok <= 0 {
					if strings.HasPrefix(string(reply), "-") {
						continue // e.g. lost contact; the token was not replied
					}
					mu.Lock()
					bad = append(bad, fmt.Errorf("LOCK.ACQUIRE %q %s %s: reply %q", r, owner, ttl, reply))
					mu.Unlock()
					continue
				}
				log.add(r, tok)
				if rng.IntN(2) == 0 {
					if _, err := c.TryDo("LOCK.RELEASE", r, owner); err != nil {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return bad
}

// TestTokensNeverRegressAcrossKill9 (guarantees 1 and 2): fenceproxy is
// SIGKILLed in the middle of a storm of acquires and releases, three times;
// after each restart on the same data dir every resource's next token is
// greater than every token any reply carried before, and the old newest
// token is stale.
func TestTokensNeverRegressAcrossKill9(t *testing.T) {
	e := startEnv(t, 0)
	resources := make([]string, 20)
	for i := range resources {
		resources[i] = fmt.Sprintf("kill9/res-%02d", i)
	}
	var log tokenLog
	for round := range 3 {
		roundStart := time.Now()
		conns := make([]*testenv.Conn, 50)
		for i := range conns {
			conns[i] = e.dial(t)
			conns[i].SetTimeout(3 * time.Second)
		}
		stop := make(chan struct{})
		done := make(chan []error, 1)
		go func() { done <- churn(conns, resources, &log, stop, 100000, uint64(round+1)) }()

		// Let the storm run, check another client is still served, then
		// kill -9 in the middle of it.
		time.Sleep(time.Duration(1500+250*round) * time.Millisecond)
		expectPing(t, e.proxy.Addr)
		before := log.grants()
		e.proxy.Kill9()
		time.Sleep(100 * time.Millisecond)
		close(stop)
		var bad []error
		select {
		case bad = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: workers did not stop within 20s of the kill", round)
		}
		for _, err := range bad {
			t.Errorf("round %d: %v", round, err)
		}
		if before == 0 {
			t.Fatalf("round %d: no LOCK.ACQUIRE was granted before the kill", round)
		}
		t.Logf("round %d: %d grants before kill -9", round, log.grants())
		for _, c := range conns {
			c.Close()
		}

		t.Logf("round %d: workers stopped %v after start", round, time.Since(roundStart))
		e.proxy.Restart(t)
		t.Logf("round %d: proxy restarted %v after start", round, time.Since(roundStart))
		c := e.dial(t)
		c.SetTimeout(10 * time.Second)
		after := fmt.Sprintf("after-kill-%d", round)
		for _, r := range resources {
			old := log.get(r)
			// Every lease was at most 300ms; wait for it to run out.
			reply := c.Do("LOCK.ACQUIRE", r, after, "10000", "WAIT", "5000")
			tok, ok := testenv.ParseInt(reply)
			if !ok || tok <= old {
				t.Fatalf("round %d: LOCK.ACQUIRE %q %s 10000 WAIT 5000 after kill -9 and restart: reply %q, want a token > %d (the greatest replied before)", round, r, after, reply, old)
			}
			if old > 0 {
				expect(t, c, replyZero, "FENCE.CHECK", r, itoa(old))
			}
			expect(t, c, replyOne, "FENCE.CHECK", r, itoa(tok))
			expect(t, c, replyOne, "LOCK.RELEASE", r, after)
			log.add(r, tok)
		}
		c.Close()
		t.Logf("round %d: every resource checked %v after start", round, time.Since(roundStart))
	}
	expectPing(t, e.proxy.Addr)
}

// TestTokensNeverRegressAcrossRedisDataLoss (guarantee 1): the master
// restarts empty and the replica resyncs from it; later tokens still exceed
// earlier ones and the old holder's token turns stale.
func TestTokensNeverRegressAcrossRedisDataLoss(t *testing.T) {
	e := startEnv(t, 0)
	c := e.dial(t)
	resources := []string{"loss/a", "loss/b", "loss/c", "loss/{d}", "loss/e\r\n"}
	old := map[string]int64{}
	for _, r := range resources {
		// Several grants each, so "newest" is not simply the first.
		for i := range 3 {
			tok := token(t, c, "LOCK.ACQUIRE", r, fmt.Sprintf("old-%d", i), "60000")
			if tok <= old[r] {
				t.Fatalf("LOCK.ACQUIRE %q old-%d: token %d, want > %d", r, i, tok, old[r])
			}
			old[r] = tok
			if i < 2 {
				expect(t, c, replyOne, "LOCK.RELEASE", r, fmt.Sprintf("old-%d", i))
			}
		}
	}
	c.Close()

	e.master.Restart(t)
	e.master.WaitReplicas(t, 1)
	// The replica resynced from the empty master: every owner record is
	// gone (the proxy's heartbeat soon writes its token authority's two
	// keys again, so DBSIZE need not reach 0).
	rc := testenv.Dial(t, e.replica.Addr)
	records := []string{"EXISTS"}
	for _, r := range resources {
		records = append(records, "fenceproxy:lock:{"+r+"}")
	}
	deadline := time.Now().Add(10 * time.Second)
	for string(rc.Do(records...)) != replyZero {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s still holds owner records 10s after the master restarted empty: EXISTS %q", e.replica.Addr, rc.Do(records...))
		}
		time.Sleep(20 * time.Millisecond)
	}
	expectPing(t, e.proxy.Addr)

	c = e.dial(t)
	for _, r := range resources {
		// The proxy may need a moment to reconnect; an error reply is
		// allowed meanwhile, a token that does not exceed the old ones never.
		var reply []byte
		deadline := time.Now().Add(5 * time.Second)
		for {
			reply = c.Do("LOCK.ACQUIRE", r, "new", "60000")
			if _, ok := testenv.ParseInt(reply); ok || testenv.IsNull(reply) {
				break
			}
			if !strings.HasPrefix(string(reply), "-") || time.Now().After(deadline) {
				t.Fatalf("LOCK.ACQUIRE %q new 60000 after the master restarted empty: reply %q (still, after retrying for 5s), want a token", r, reply)
			}
			time.Sleep(50 * time.Millisecond)
		}
		tok, ok := testenv.ParseInt(reply)
		if !ok || tok <= old[r] {
			t.Fatalf("LOCK.ACQUIRE %q new 60000 after the master restarted empty: reply %q, want a token > %d (issued before the restart)", r, reply, old[r])
		}
		expect(t, c, replyZero, "FENCE.CHECK", r, itoa(old[r]))
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(tok))
		li := expectHeld(t, c, r, "new", tok)
		if li.Token != tok {
			t.Fatalf("LOCK.INFO %q: %q, want token %d", r, li.Raw, tok)
		}
		// The old holder lost its lease with the data: it cannot renew,
		// release or take the lock back.
		expect(t, c, replyNull, "LOCK.RENEW", r, "old-2", "60000")
		expect(t, c, replyZero, "LOCK.RELEASE", r, "old-2")
		expect(t, c, replyNull, "LOCK.ACQUIRE", r, "old-2", "60000")
		expectHeld(t, c, r, "new", tok)
	}
	expectPing(t, e.proxy.Addr)
}

// TestNoReplicas: with --min-replicas 1 and the replica stopped (SIGSTOP) or
// killed, LOCK.ACQUIRE answers -NOREPLICAS and grants nothing; once the
// replica is back, acquires succeed again.
func TestNoReplicas(t *testing.T) {
	e := startEnv(t, 100*time.Millisecond)
	for _, how := range []string{"Stop", "Kill"} {
		t.Run(how, func(t *testing.T) {
			c := e.dial(t)
			r := resName(t, "r")
			// With a 100ms --replica-timeout a loaded machine may refuse a
			// grant now and then; that is -NOREPLICAS as the contract says,
			// so retry a bounded number of times.
			var before int64
			for attempt := 0; ; attempt++ {
				reply := c.Do("LOCK.ACQUIRE", r, "before", "60000")
				if n, ok := testenv.ParseInt(reply); ok && n > 0 {
					before = n
					break
				}
				if !strings.HasPrefix(string(reply), "-NOREPLICAS") || attempt == 20 {
					t.Fatalf("LOCK.ACQUIRE %q before 60000 (replica up): reply %q after %d attempts, want a token", r, reply, attempt+1)
				}
				time.Sleep(50 * time.Millisecond)
			}
			expect(t, c, replyOne, "LOCK.RELEASE", r, "before")

			if how == "Stop" {
				e.replica.Stop()
				t.Cleanup(e.replica.Cont)
			} else {
				e.replica.Kill()
			}
			for i := range 3 {
				expectErr(t, c, "-NOREPLICAS", "LOCK.ACQUIRE", r, "owner", "60000")
				li := expectFree(t, c, r)
				if i == 0 {
					// "nothing was granted": no token was issued, so the
					// newest issued is still the one before, and it is
					// still current.
					if li.Token != before {
						t.Errorf("LOCK.INFO %q after -NOREPLICAS: %q, want token %d (the newest issued; the refused grant issued nothing)", r, li.Raw, before)
						if li.Token > before {
							if got := c.Do("FENCE.CHECK", r, itoa(li.Token)); !strings.HasPrefix(string(got), "-ERR") {
								t.Errorf("FENCE.CHECK %q %d (the refused grant's token, never replied): reply %q, want -ERR (never issued)", r, li.Token, got)
							}
						}
					}
					if got := c.Do("FENCE.CHECK", r, itoa(before)); string(got) != replyOne {
						t.Errorf("FENCE.CHECK %q %d after -NOREPLICAS: reply %q, want %q (no newer token was issued)", r, before, got, replyOne)
					}
				}
				// Another owner is not blocked by the refused grant.
				expectErr(t, c, "-NOREPLICAS", "LOCK.ACQUIRE", r, "other", "60000")
				expectFree(t, c, r)
			}
			// Other clients are still served while the replica is away.
			expectPing(t, e.proxy.Addr)
			expect(t, c, replyPong, "PING")

			if how == "Stop" {
				e.replica.Cont()
			} else {
				e.replica.Restart(t)
			}
			e.master.WaitReplicas(t, 1)
			deadline := time.Now().Add(10 * time.Second)
			var reply []byte
			for {
				reply = c.Do("LOCK.ACQUIRE", r, "owner", "60000")
				if !strings.HasPrefix(string(reply), "-NOREPLICAS") || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			tok, ok := testenv.ParseInt(reply)
			if !ok || tok <= before {
				t.Fatalf("LOCK.ACQUIRE %q owner 60000 after the replica came back: reply %q, want a token > %d", r, reply, before)
			}
			expectHeld(t, c, r, "owner", tok)
			expect(t, c, replyOne, "LOCK.RELEASE", r, "owner")
		})
	}
}

// TestTokenOrderEqualsGrantOrder: 20 goroutines contend for one resource;
// each winner, while it holds the lock, appends its token to a shared list.
// The list must strictly increase, and no two goroutines may hold at once.
func TestTokenOrderEqualsGrantOrder(t *testing.T) {
	e := startEnv(t, 0)
	const r = "contended"
	conns := make([]*testenv.Conn, 20)
	for i := range conns {
		conns[i] = e.dial(t)
	}
	var (
		mu      sync.Mutex
		order   []int64
		holding atomic.Int32
		bad     []error
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		bad = append(bad, err)
		mu.Unlock()
	}
	deadline := time.Now().Add(time.Second)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("contender-%d", i)
			for n := 0; n < 10000 && time.Now().Before(deadline); n++ {
				args := []string{"LOCK.ACQUIRE", r, owner, "30000"}
				if n%2 == 1 {
					args = append(args, "WAIT", "100")
				}
				reply, err := c.TryDo(args...)
				if err != nil {
					fail(fmt.Errorf("%s: %v", testenv.ShowCommand(args), err))
					return
				}
				if testenv.IsNull(reply) {
					continue
				}
				tok, ok := testenv.ParseInt(reply)
				if !ok {
					fail(fmt.Errorf("%s: reply %q, want a token or null", testenv.ShowCommand(args), reply))
					return
				}
				if h := holding.Add(1); h != 1 {
					fail(fmt.Errorf("%s: granted token %d while %d other contender(s) held %q", testenv.ShowCommand(args), tok, h-1, r))
				}
				mu.Lock()
				order = append(order, tok)
				mu.Unlock()
				holding.Add(-1)
				reply, err = c.TryDo("LOCK.RELEASE", r, owner)
				if err != nil || string(reply) != replyOne {
					fail(fmt.Errorf("LOCK.RELEASE %q %s: reply %q (err %v), want %q", r, owner, reply, err, replyOne))
					return
				}
			}
		}()
	}
	// Meanwhile, another client is served.
	expectPing(t, e.proxy.Addr)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(20 * time.Second):
		t.Fatalf("contenders did not finish within 20s")
	}
	for _, err := range bad {
		t.Error(err)
	}
	if len(order) < 2 {
		t.Fatalf("only %d grants of %q under contention", len(order), r)
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("tokens of %q in grant order do not strictly increase: #%d is %d after %d (%d grants)", r, i, order[i], order[i-1], len(order))
		}
	}
	t.Logf("%d grants of %q in order", len(order), r)
	c := e.dial(t)
	li := expectFree(t, c, r)
	if li.Token != order[len(order)-1] {
		t.Fatalf("LOCK.INFO %q: %q, want token %d (the last grant)", r, li.Raw, order[len(order)-1])
	}
}

// TestCleanRestartKeepsTokens: SIGTERM drains and exits 0; after a restart
// on the same data dir a held lease and its token are still known, the
// holder's retry returns the same token, and new tokens exceed old ones.
func TestCleanRestartKeepsTokens(t *testing.T) {
	e := startEnv(t, 0)
	c := e.dial(t)
	held, freed := "clean/held", "clean/freed"
	heldTok := token(t, c, "LOCK.ACQUIRE", held, "alice", "60000")
	var freedTok int64
	for i := range 5 {
		freedTok = token(t, c, "LOCK.ACQUIRE", freed, fmt.Sprintf("o%d", i), "60000")
		expect(t, c, replyOne, "LOCK.RELEASE", freed, fmt.Sprintf("o%d", i))
	}
	c.Close()

	code, err := e.proxy.Terminate()
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit code %d, err %v; want a clean exit 0", code, err)
	}
	e.proxy.Restart(t)

	c = e.dial(t)
	expectHeld(t, c, held, "alice", heldTok)
	expect(t, c, replyOne, "FENCE.CHECK", held, itoa(heldTok))
	expect(t, c, ":"+itoa(heldTok)+"\r\n", "LOCK.ACQUIRE", held, "alice", "60000")
	expect(t, c, ":"+itoa(heldTok)+"\r\n", "LOCK.RENEW", held, "alice", "60000")
	expect(t, c, replyNull, "LOCK.ACQUIRE", held, "bob", "60000")
	expect(t, c, replyOne, "LOCK.RELEASE", held, "alice")
	if tok := token(t, c, "LOCK.ACQUIRE", held, "bob", "60000"); tok <= heldTok {
		t.Fatalf("LOCK.ACQUIRE %q bob after a clean restart: token %d, want > %d", held, tok, heldTok)
	}
	li := expectFree(t, c, freed)
	if li.Token != freedTok {
		t.Fatalf("LOCK.INFO %q after a clean restart: %q, want token %d", freed, li.Raw, freedTok)
	}
	expect(t, c, replyOne, "FENCE.CHECK", freed, itoa(freedTok))
	if tok := token(t, c, "LOCK.ACQUIRE", freed, "new", "60000"); tok <= freedTok {
		t.Fatalf("LOCK.ACQUIRE %q new after a clean restart: token %d, want > %d", freed, tok, freedTok)
	}
	expect(t, c, replyZero, "FENCE.CHECK", freed, itoa(freedTok))
	expectPing(t, e.proxy.Addr)
}

// TestStaleReleaseKeepsNewerLease (guarantee 3): A's lease runs out, B takes
// the lock; A's late release, renew and retry change nothing of B's lease.
func TestStaleReleaseKeepsNewerLease(t *testing.T) {
	e := startEnv(t, 0)
	c := e.dial(t)
	const r = "stale"
	a := token(t, c, "LOCK.ACQUIRE", r, "A", "200")
	waitFree(t, c, r, 5*time.Second)
	b := token(t, c, "LOCK.ACQUIRE", r, "B", "60000")
	if b <= a {
		t.Fatalf("LOCK.ACQUIRE %q B after A's lease (token %d) ran out: token %d, want greater", r, a, b)
	}
	expect(t, c, replyZero, "LOCK.RELEASE", r, "A")
	expectHeld(t, c, r, "B", b)
	expect(t, c, replyNull, "LOCK.RENEW", r, "A", "60000")
	expect(t, c, replyNull, "LOCK.ACQUIRE", r, "A", "60000")
	expectHeld(t, c, r, "B", b)
	expect(t, c, replyZero, "FENCE.CHECK", r, itoa(a))
	expect(t, c, replyOne, "FENCE.CHECK", r, itoa(b))
	expect(t, c, ":"+itoa(b)+"\r\n", "LOCK.RENEW", r, "B", "60000")
	expect(t, c, replyOne, "LOCK.RELEASE", r, "B")
	expectFree(t, c, r)
	expectPing(t, e.proxy.Addr)
}
