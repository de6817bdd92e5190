package tier

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestEntryEncoding(t *testing.T) {
	batch := entry{kind: kindBatch, ops: []entry{
		{kind: kindReserve, resource: "r1", token: 7, term: 3},
		{kind: kindConfirm, resource: "r0", token: 5},
		{kind: kindCancel, resource: "r2", token: 6},
	}}
	for _, e := range []entry{
		{kind: kindLeaderStart, term: 2, node: "n1", addr: "a:1", tierID: "t"},
		{kind: kindWindow},
		{kind: kindReserve, resource: "r", token: 1, term: 1},
		{kind: kindConfirm, resource: "r", token: 1},
		{kind: kindCancel, resource: "r", token: 1},
		{kind: kindAdopt, token: 9},
		batch,
	} {
		got, err := decodeEntry(e.encode())
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("%+v: decoded as %+v, %v", e, got, err)
		}
	}
	enc := batch.encode()
	bad := map[string][]byte{
		"truncated":      enc[:len(enc)-1],
		"trailing bytes": append(append([]byte(nil), enc...), 0),
		"batch in a batch": (&entry{kind: kindBatch, ops: []entry{
			{kind: kindBatch, ops: []entry{{kind: kindConfirm, resource: "r", token: 1}}}}}).encode(),
		"window in a batch": (&entry{kind: kindBatch, ops: []entry{{kind: kindWindow}}}).encode(),
		"too many ops":      append([]byte{entryVersion, kindBatch}, 0xff, 0xff, 0x03),
		"unknown kind":      {entryVersion, 99},
	}
	for name, b := range bad {
		if _, err := decodeEntry(b); !errors.Is(err, errBadEntry) {
			t.Errorf("%s: %v, want errBadEntry", name, err)
		}
	}
}

// Confirms ride in later entries (not awaited) and reach every node's state.
func TestConfirmsReachFollowers(t *testing.T) {
	tt := startTestTier(t, 3)
	l := tt.leader()
	s := tt.nodes[l].Store()
	var wg sync.WaitGroup
	toks := make([]uint64, 20)
	for i := range toks {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			toks[i] = grant(t, s, "r"+string(rune('a'+i)))
		}(i)
	}
	wg.Wait()
	f := tt.nodes[tt.follower(l)]
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := f.fsm.state().pending == 0
		for i, tok := range toks {
			got, err := f.fsm.newestOf("r" + string(rune('a'+i)))
			if err != nil {
				t.Fatal(err)
			}
			ok = ok && got == tok
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follower's state after 20 confirmed grants: %+v", f.fsm.state())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := tt.nodes[l].Status(); st.BatchOps < 40 || st.BatchEntries == 0 {
		t.Fatalf("leader proposed %d ops in %d entries, want the 40 reservations and confirmations", st.BatchOps, st.BatchEntries)
	}
}

// An op queued during an earlier leadership is never proposed: a Reserve
// made by a leader that has since lost (and maybe regained) leadership
// fails.
func TestProposalOfAnEarlierLeadershipRefused(t *testing.T) {
	tt := startTestTier(t, 3)
	l := tt.leader()
	n := tt.nodes[l]
	tok, err := n.Store().NextToken()
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	epoch, term := n.epoch, n.term
	n.mu.Unlock()
	done := make(chan error, 1)
	n.prop.submit(proposal{op: entry{kind: kindReserve, resource: "r", token: tok, term: term}, epoch: epoch - 1, done: done})
	var u *UnavailableError
	if err := <-done; !errors.As(err, &u) || !u.Lost {
		t.Fatalf("a Reserve of an earlier leadership: %v, want UnavailableError{Lost}", err)
	}
	if p := n.fsm.state().pending; p != 0 {
		t.Fatalf("%d reservations pending after the refused one", p)
	}
}

// waitProposed waits (bounded) until n's proposer has nothing queued and
// nothing in flight: every op submitted before the call is then committed
// and applied on n (a Batch's future returns once the leader applied it),
// or was dropped (an earlier leadership's).
func waitProposed(t *testing.T, n *Node) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n.prop.mu.Lock()
		idle := len(n.prop.queue) == 0 && n.prop.inflight == 0
		n.prop.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the proposer did not empty within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A Batch is at most maxBatchOps ops and maxBatchBytes encoded (the
// LogCache keeps the newest entries whole on every node), and at least
// one op.
func TestBatchBounds(t *testing.T) {
	// n Reserves of nameLen-byte names, large tokens and terms but with
	// small ones (the ops count's bound, not the bytes', then applies).
	queue := func(n, nameLen int, small bool) []proposal {
		q := make([]proposal, n)
		for i := range q {
			r := fmt.Sprintf("%0*d", nameLen, i%10)
			op := entry{kind: kindReserve, resource: r, token: 1<<53 - 1, term: 1 << 40}
			if small {
				op.token, op.term = 7, 1
			}
			q[i] = proposal{op: op}
		}
		return q
	}
	encoded := func(q []proposal) int {
		e := entry{kind: kindBatch}
		for _, p := range q {
			e.ops = append(e.ops, p.op)
		}
		return len(e.encode())
	}
	for _, c := range []struct {
		n, nameLen int
		small      bool
		want       int // 0: bounded by bytes
	}{
		{1, 512, false, 1},
		{10, 8, false, 10},
		{2 * maxBatchOps, 1, true, maxBatchOps},
		{2 * maxBatchOps, 1, false, 0},
		{1000, 512, false, 0},
	} {
		q := queue(c.n, c.nameLen, c.small)
		k := batchLen(q)
		if c.want != 0 && k != c.want {
			t.Errorf("%d ops of %d-byte names: a Batch of %d, want %d", c.n, c.nameLen, k, c.want)
		}
		// Bounded by bytes, the next op would not have fitted.
		if size := encoded(q[:k]); size > maxBatchBytes || k < min(c.n, maxBatchOps) && encoded(q[:k+1]) <= maxBatchBytes {
			t.Errorf("%d ops of %d-byte names: a Batch of %d ops, %d bytes (bound %d)", c.n, c.nameLen, k, size, maxBatchBytes)
		}
	}
}
