package contract_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// acquireResult is the outcome of a LOCK.ACQUIRE run on another goroutine.
type acquireResult struct {
	reply   []byte
	err     error
	elapsed time.Duration
}

// acquireAsync sends args on c from a new goroutine and delivers the reply.
// c must not be used by anyone else until the result arrives.
func acquireAsync(c *testenv.Conn, args ...string) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		start := time.Now()
		reply, err := c.TryDo(args...)
		ch <- acquireResult{reply, err, time.Since(start)}
	}()
	return ch
}

// result waits (at most d) for an asynchronous command's reply.
func result(t *testing.T, ch <-chan acquireResult, d time.Duration, what string) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r
	case <-time.After(d):
		t.Fatalf("%s: no reply within %v", what, d)
	}
	return acquireResult{}
}

// waitWaiters waits until LOCK.INFO resource reports n waiters.
func waitWaiters(t *testing.T, c *testenv.Conn, resource string, n int64) {
	t.Helper()
	waitInfo(t, c, resource, 5*time.Second, "showing the waiter(s)", func(li lockInfo) bool { return li.Waiters == n })
}

// TestLockFamily covers each clause of CONTRACT.md "The lock family" on one
// proxy (master + replica, --min-replicas 1).
func TestLockFamily(t *testing.T) {
	e := startEnv(t, 0)

	t.Run("AcquireGrantsIntegerToken", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "10000")
		li := expectHeld(t, c, r, "alice", tok)
		if li.TTL > 10000 || li.Waiters != 0 {
			t.Fatalf("LOCK.INFO %q after a 10000ms grant: %q, want 0 < ttl-ms <= 10000 and waiters 0", r, li.Raw)
		}
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(tok))
	})

	t.Run("SameOwnerRetryReturnsSameTokenAndRearms", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "2000")
		// Let the lease run down, then retry.
		time.Sleep(500 * time.Millisecond)
		before := expectHeld(t, c, r, "alice", tok)
		expect(t, c, ":"+itoa(tok)+"\r\n", "LOCK.ACQUIRE", r, "alice", "2000")
		after := expectHeld(t, c, r, "alice", tok)
		if after.TTL <= before.TTL {
			t.Fatalf("LOCK.ACQUIRE %q alice 2000 (retry) did not re-arm the lease: ttl-ms %d before, %d after", r, before.TTL, after.TTL)
		}
		// A retry with a longer ttl re-arms to that ttl.
		expect(t, c, ":"+itoa(tok)+"\r\n", "LOCK.ACQUIRE", r, "alice", "60000")
		if li := expectHeld(t, c, r, "alice", tok); li.TTL <= 2000 {
			t.Fatalf("LOCK.ACQUIRE %q alice 60000 (retry): LOCK.INFO %q, want ttl-ms > 2000", r, li.Raw)
		}
	})

	t.Run("OtherOwnerGetsNull", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "10000")
		expect(t, c, replyNull, "LOCK.ACQUIRE", r, "bob", "10000")
		expect(t, c, replyNull, "lock.acquire", r, "bob", "10000", "WAIT", "0")
		expectHeld(t, c, r, "alice", tok)
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(tok))
	})

	t.Run("WaitGetsLockAfterRelease", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "holder", "30000")
		w := e.dial(t)
		w.SetTimeout(15 * time.Second)
		ch := acquireAsync(w, "LOCK.ACQUIRE", r, "waiter", "30000", "WAIT", "10000")
		waitWaiters(t, c, r, 1)

		rel := e.dial(t)
		released := make(chan []byte, 1)
		go func() {
			reply, _ := rel.TryDo("LOCK.RELEASE", r, "holder")
			released <- reply
		}()
		got := result(t, ch, 15*time.Second, "LOCK.ACQUIRE "+r+" waiter 30000 WAIT 10000")
		n, ok := testenv.ParseInt(got.reply)
		if !ok || n <= tok {
			t.Fatalf("LOCK.ACQUIRE %q waiter 30000 WAIT 10000: reply %q after the holder's release, want a token > %d", r, got.reply, tok)
		}
		if rr := <-released; string(rr) != replyOne {
			t.Fatalf("LOCK.RELEASE %q holder (while a waiter waited): reply %q, want %q", r, rr, replyOne)
		}
		li := expectHeld(t, c, r, "waiter", n)
		if li.Waiters != 0 {
			t.Fatalf("LOCK.INFO %q after the waiter was granted: %q, want waiters 0", r, li.Raw)
		}
		expect(t, c, replyZero, "FENCE.CHECK", r, itoa(tok))
	})

	t.Run("WaitTimesOutWithNull", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "holder", "30000")
		w := e.dial(t)
		start := time.Now()
		expect(t, w, replyNull, "LOCK.ACQUIRE", r, "waiter", "30000", "WAIT", "300")
		if el := time.Since(start); el < 300*time.Millisecond {
			t.Fatalf("LOCK.ACQUIRE %q waiter 30000 WAIT 300: null after only %v, want after the 300ms wait", r, el)
		}
		li := expectHeld(t, c, r, "holder", tok)
		if li.Waiters != 0 {
			t.Fatalf("LOCK.INFO %q after the wait timed out: %q, want waiters 0", r, li.Raw)
		}
	})

	t.Run("WaitGetsLockWhenLeaseRunsOut", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "holder", "200")
		w := e.dial(t)
		w.SetTimeout(10 * time.Second)
		n := token(t, w, "LOCK.ACQUIRE", r, "waiter", "30000", "WAIT", "5000")
		if n <= tok {
			t.Fatalf("LOCK.ACQUIRE %q waiter 30000 WAIT 5000: token %d after the holder's lease ran out, want > %d", r, n, tok)
		}
		expectHeld(t, c, r, "waiter", n)
	})

	// "waiters are served first come, first served": two waiters queued in
	// order; the first gets the lock at the release, the second after the
	// first releases.
	t.Run("WaitersFirstComeFirstServed", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "holder", "30000")
		w1, w2 := e.dial(t), e.dial(t)
		w1.SetTimeout(15 * time.Second)
		w2.SetTimeout(15 * time.Second)
		ch1 := acquireAsync(w1, "LOCK.ACQUIRE", r, "first", "30000", "WAIT", "10000")
		waitWaiters(t, c, r, 1)
		ch2 := acquireAsync(w2, "LOCK.ACQUIRE", r, "second", "30000", "WAIT", "10000")
		waitWaiters(t, c, r, 2)

		expect(t, c, replyOne, "LOCK.RELEASE", r, "holder")
		got1 := result(t, ch1, 15*time.Second, "LOCK.ACQUIRE "+r+" first … WAIT 10000")
		t1, ok := testenv.ParseInt(got1.reply)
		if !ok || t1 <= tok {
			t.Fatalf("LOCK.ACQUIRE %q first 30000 WAIT 10000 (queued first): reply %q after the release, want a token > %d (first come, first served)", r, got1.reply, tok)
		}
		expectHeld(t, c, r, "first", t1)
		expect(t, c, replyOne, "LOCK.RELEASE", r, "first")
		got2 := result(t, ch2, 15*time.Second, "LOCK.ACQUIRE "+r+" second … WAIT 10000")
		t2, ok := testenv.ParseInt(got2.reply)
		if !ok || t2 <= t1 {
			t.Fatalf("LOCK.ACQUIRE %q second 30000 WAIT 10000 (queued second): reply %q, want a token > %d", r, got2.reply, t1)
		}
	})

	// "LOCK.RELEASE: Integer 1: released (the next waiter, if any, is
	// granted)": a newcomer that arrives right after the release, without
	// WAIT, must not take the lock from a waiter that queued before it.
	t.Run("ReleaseGrantsNextWaiterNotNewcomer", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "holder", "30000")
		w := e.dial(t)
		w.SetTimeout(15 * time.Second)
		ch := acquireAsync(w, "LOCK.ACQUIRE", r, "waiter", "30000", "WAIT", "10000")
		waitWaiters(t, c, r, 1)

		// Release and a newcomer's acquire in one pipeline.
		c.Send("LOCK.RELEASE", r, "holder")
		c.Send("LOCK.ACQUIRE", r, "newcomer", "30000")
		c.Flush()
		relReply, err := c.ReadReply()
		if err != nil || string(relReply) != replyOne {
			t.Fatalf("LOCK.RELEASE %q holder: reply %q (err %v), want %q", r, relReply, err, replyOne)
		}
		newReply, err := c.ReadReply()
		if err != nil {
			t.Fatalf("LOCK.ACQUIRE %q newcomer 30000: %v", r, err)
		}
		got := result(t, ch, 15*time.Second, "LOCK.ACQUIRE "+r+" waiter … WAIT 10000")
		if string(newReply) != replyNull {
			t.Errorf("LOCK.ACQUIRE %q newcomer 30000, sent right after the release while \"waiter\" was queued: reply %q, want %q (the next waiter is granted)", r, newReply, replyNull)
		}
		if n, ok := testenv.ParseInt(got.reply); !ok || n <= tok {
			t.Errorf("LOCK.ACQUIRE %q waiter 30000 WAIT 10000 (queued before the release): reply %q, want a token > %d; LOCK.INFO now %q", r, got.reply, tok, info(t, c, r).Raw)
		}
	})

	t.Run("ExpiredLeaseIsNotRevived", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "150")
		li := waitFree(t, c, r, 5*time.Second)
		if li.TTL != -2 || li.Token != tok {
			t.Fatalf("LOCK.INFO %q after the lease ran out: %q, want ttl-ms -2 and token %d", r, li.Raw, tok)
		}
		expect(t, c, replyNull, "LOCK.RENEW", r, "alice", "10000")
		expectFree(t, c, r)
		expect(t, c, replyZero, "LOCK.RELEASE", r, "alice")
		bob := token(t, c, "LOCK.ACQUIRE", r, "bob", "150")
		if bob <= tok {
			t.Fatalf("LOCK.ACQUIRE %q bob after alice's lease (token %d) ran out: token %d, want greater", r, tok, bob)
		}
		waitFree(t, c, r, 5*time.Second)
		// The same owner after its own lease lapsed gets a new, greater token.
		bob2 := token(t, c, "LOCK.ACQUIRE", r, "bob", "10000")
		if bob2 <= bob {
			t.Fatalf("LOCK.ACQUIRE %q bob after bob's lease (token %d) ran out: token %d, want greater", r, bob, bob2)
		}
		expect(t, c, replyZero, "FENCE.CHECK", r, itoa(bob))
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(bob2))
	})

	t.Run("RenewByHolderRearmsAndReturnsToken", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "2000")
		time.Sleep(300 * time.Millisecond)
		before := expectHeld(t, c, r, "alice", tok)
		expect(t, c, ":"+itoa(tok)+"\r\n", "LOCK.RENEW", r, "alice", "60000")
		after := expectHeld(t, c, r, "alice", tok)
		if after.TTL <= before.TTL || after.TTL <= 2000 {
			t.Fatalf("LOCK.RENEW %q alice 60000: ttl-ms %d before, %d after, want re-armed to about 60000", r, before.TTL, after.TTL)
		}
	})

	t.Run("RenewByWrongOwnerIsNull", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "10000")
		expect(t, c, replyNull, "LOCK.RENEW", r, "bob", "10000")
		expect(t, c, replyNull, "LOCK.RENEW", resName(t, "never-locked"), "alice", "10000")
		expectHeld(t, c, r, "alice", tok)
		expectFree(t, c, resName(t, "never-locked"))
	})

	t.Run("ReleaseOneThenZero", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "10000")
		expect(t, c, replyOne, "LOCK.RELEASE", r, "alice")
		li := expectFree(t, c, r)
		if li.Token != tok {
			t.Fatalf("LOCK.INFO %q after release: %q, want token %d (newest issued)", r, li.Raw, tok)
		}
		expect(t, c, replyZero, "LOCK.RELEASE", r, "alice")
		expect(t, c, replyNull, "LOCK.RENEW", r, "alice", "10000")
		// Free again: anyone may take it, with a greater token.
		if n := token(t, c, "LOCK.ACQUIRE", r, "bob", "10000"); n <= tok {
			t.Fatalf("LOCK.ACQUIRE %q bob after release of token %d: token %d, want greater", r, tok, n)
		}
	})

	t.Run("ReleaseByWrongOwnerIsZeroAndHolderKeepsLock", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "10000")
		expect(t, c, replyZero, "LOCK.RELEASE", r, "bob")
		expect(t, c, replyZero, "LOCK.RELEASE", r, "alicE")
		expect(t, c, replyZero, "LOCK.RELEASE", r, "alice\x00")
		expectHeld(t, c, r, "alice", tok)
		expect(t, c, ":"+itoa(tok)+"\r\n", "LOCK.RENEW", r, "alice", "10000")
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(tok))
		expect(t, c, replyOne, "LOCK.RELEASE", r, "alice")
	})

	t.Run("FenceCheck", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		t1 := token(t, c, "LOCK.ACQUIRE", r, "alice", "10000")
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(t1))
		expect(t, c, replyOne, "LOCK.RELEASE", r, "alice")
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(t1)) // still the newest issued
		t2 := token(t, c, "LOCK.ACQUIRE", r, "bob", "10000")
		if t2 <= t1 {
			t.Fatalf("LOCK.ACQUIRE %q bob: token %d, want > %d", r, t2, t1)
		}
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(t2))
		expect(t, c, replyZero, "FENCE.CHECK", r, itoa(t1))
		// A token issued for another resource: below this resource's
		// newest it cannot be told from a stale one (0); above it, it
		// cannot have been issued for it (-ERR).
		other := resName(t, "other")
		t3 := token(t, c, "LOCK.ACQUIRE", other, "carol", "10000")
		expect(t, c, replyZero, "FENCE.CHECK", other, itoa(t1))
		expectErr(t, c, "-ERR token "+itoa(t3)+" was never issued", "FENCE.CHECK", r, itoa(t3))
		expect(t, c, replyOne, "LOCK.RELEASE", other, "carol")
		// Never issued for this resource: above the newest, on a resource
		// never locked, or not a positive integer.
		for _, bad := range [][]string{
			{"FENCE.CHECK", r, itoa(t2 + 1)},
			{"FENCE.CHECK", r, "9223372036854775807"},
			{"FENCE.CHECK", resName(t, "never-locked"), itoa(t1)},
			{"FENCE.CHECK", resName(t, "never-locked"), "1"},
			{"FENCE.CHECK", r, "0"},
			{"FENCE.CHECK", r, "-1"},
			{"FENCE.CHECK", r, "-" + itoa(t2)},
			{"FENCE.CHECK", r, "abc"},
			{"FENCE.CHECK", r, "1.5"},
			{"FENCE.CHECK", r, ""},
			{"FENCE.CHECK", r, " " + itoa(t2)},
			{"FENCE.CHECK", r, "99999999999999999999"},
		} {
			expectErr(t, c, "-ERR", bad...)
			expect(t, c, replyPong, "PING")
		}
		expect(t, c, replyOne, "FENCE.CHECK", r, itoa(t2))
	})

	t.Run("InfoHeldAndFree", func(t *testing.T) {
		c := e.dial(t)
		never := resName(t, "never-locked")
		li := info(t, c, never)
		if li.OwnerRaw != replyNull || li.Token != 0 || li.TTL != -2 || li.Waiters != 0 {
			t.Fatalf("LOCK.INFO %q (never locked): %q, want owner null, token 0, ttl-ms -2, waiters 0", never, li.Raw)
		}
		r := resName(t, "r")
		tok := token(t, c, "LOCK.ACQUIRE", r, "alice", "5000")
		li = expectHeld(t, c, r, "alice", tok)
		if li.TTL > 5000 || li.Waiters != 0 {
			t.Fatalf("LOCK.INFO %q (held, ttl 5000): %q, want 0 < ttl-ms <= 5000, waiters 0", r, li.Raw)
		}
		expect(t, c, replyOne, "LOCK.RELEASE", r, "alice")
		li = info(t, c, r)
		if li.OwnerRaw != replyNull || li.Token != tok || li.TTL != -2 || li.Waiters != 0 {
			t.Fatalf("LOCK.INFO %q (released): %q, want owner null, token %d, ttl-ms -2, waiters 0", r, li.Raw, tok)
		}
	})

	t.Run("NamesAreCaseInsensitive", func(t *testing.T) {
		c := e.dial(t)
		r := resName(t, "r")
		tok := token(t, c, "lock.acquire", r, "alice", "10000")
		expect(t, c, ":"+itoa(tok)+"\r\n", "LOCK.ACQUIRE", r, "alice", "10000")
		expect(t, c, ":"+itoa(tok)+"\r\n", "Lock.Acquire", r, "alice", "10000", "wait", "0")
		expect(t, c, replyNull, "lOcK.aCqUiRe", r, "bob", "10000", "Wait", "0")
		expect(t, c, ":"+itoa(tok)+"\r\n", "lock.renew", r, "alice", "10000")
		expect(t, c, ":"+itoa(tok)+"\r\n", "Lock.Renew", r, "alice", "10000")
		expect(t, c, replyOne, "fence.check", r, itoa(tok))
		expect(t, c, replyOne, "Fence.Check", r, itoa(tok))
		for _, name := range []string{"lock.info", "Lock.Info", "LOCK.INFO"} {
			if got := string(c.Do(name, r)); !strings.HasPrefix(got, "*") || !strings.Contains(got, "alice") {
				t.Fatalf("%s %q: reply %q, want LOCK.INFO's array naming alice", name, r, got)
			}
		}
		expect(t, c, replyZero, "lock.release", r, "bob")
		expect(t, c, replyOne, "Lock.Release", r, "alice")
		expect(t, c, replyZero, "LOCK.RELEASE", r, "alice")
	})

	t.Run("BinarySafeResourceAndOwner", func(t *testing.T) {
		c := e.dial(t)
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		resources := []string{
			string(all),
			"with\r\nCRLF\r\n",
			"{braced}",
			"a{b}c",
			"}{",
			"{",
			"}",
			"\x00",
			"\xff\xfe",
			"*1\r\n$4\r\nPING\r\n",
		}
		owners := []string{
			string(all[1:]) + "\x00",
			"own\r\ner",
			"{owner}",
			"}o{",
			"\x00",
			"\xff",
		}
		tokens := map[string]int64{}
		for i, r := range resources {
			o := owners[i%len(owners)]
			tok := token(t, c, "LOCK.ACQUIRE", r, o, "30000")
			tokens[r] = tok
			expectHeld(t, c, r, o, tok)
			expect(t, c, ":"+itoa(tok)+"\r\n", "LOCK.ACQUIRE", r, o, "30000")
			expect(t, c, ":"+itoa(tok)+"\r\n", "LOCK.RENEW", r, o, "30000")
			expect(t, c, replyOne, "FENCE.CHECK", r, itoa(tok))
			// An owner that differs in one byte is another owner.
			other := o[:len(o)-1] + string([]byte{o[len(o)-1] ^ 1})
			expect(t, c, replyNull, "LOCK.ACQUIRE", r, other, "30000")
			expect(t, c, replyZero, "LOCK.RELEASE", r, other)
			expect(t, c, replyNull, "LOCK.RENEW", r, other, "30000")
		}
		// Every resource is its own lock: none of the above shares a record
		// with another, nor with its brace-stripped or prefix spellings.
		for _, r := range []string{"braced", "b", "a", "c", "", "with", "\xff"} {
			if r == "" {
				continue
			}
			li := info(t, c, r)
			if li.OwnerRaw != replyNull || li.Token != 0 {
				t.Fatalf("LOCK.INFO %q (never locked, but similar to a locked binary resource): %q, want owner null, token 0", r, li.Raw)
			}
		}
		for i, r := range resources {
			o := owners[i%len(owners)]
			expectHeld(t, c, r, o, tokens[r])
			expect(t, c, replyOne, "LOCK.RELEASE", r, o)
			expectFree(t, c, r)
		}
	})

	expectPing(t, e.proxy.Addr)
}

// TestWaitReleasedFromOtherGoroutines runs several WAITing acquires on one
// resource, each released by its holder's own goroutine, and checks every
// waiter is granted in turn with a rising token and nothing is lost.
func TestWaitReleasedFromOtherGoroutines(t *testing.T) {
	e := startEnv(t, 0)
	r := resName(t, "r")
	const n = 5
	conns := make([]*testenv.Conn, n)
	for i := range conns {
		conns[i] = e.dial(t)
		conns[i].SetTimeout(20 * time.Second)
	}
	var mu sync.Mutex
	var order []int64
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := "w" + itoa(int64(i))
			reply, err := conns[i].TryDo("LOCK.ACQUIRE", r, owner, "30000", "WAIT", "15000")
			if err != nil {
				errs <- err
				return
			}
			tok, ok := testenv.ParseInt(reply)
			if !ok {
				errs <- fmt.Errorf("LOCK.ACQUIRE %q %s 30000 WAIT 15000: reply %q, want a token", r, owner, reply)
				return
			}
			mu.Lock()
			order = append(order, tok)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			if reply, err := conns[i].TryDo("LOCK.RELEASE", r, owner); err != nil || string(reply) != replyOne {
				errs <- fmt.Errorf("LOCK.RELEASE %q %s: reply %q (err %v), want %q", r, owner, reply, err, replyOne)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("waiters on %q did not all finish within 30s", r)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(order) != n {
		t.Fatalf("%d of %d waiters on %q were granted: tokens %v", len(order), n, r, order)
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("tokens of %q in grant order %v do not strictly increase", r, order)
		}
	}
	expectPing(t, e.proxy.Addr)
}
