package tier

import (
	"errors"
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
			ok = ok && f.fsm.newestOf("r"+string(rune('a'+i))) == tok
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
