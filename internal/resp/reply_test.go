package resp

import (
	"sync"
	"testing"
)

// counter is a Completer that counts the replies it was handed.
type counter struct{ got []*Reply }

func (c *counter) Complete(r *Reply) { c.got = append(c.got, r) }

func TestReplyDone(t *testing.T) {
	var c counter
	r := NewReplyTo(&c)
	r.Buf = append(r.Buf, "+OK\r\n"...)
	r.Done()
	if len(c.got) != 1 || c.got[0] != r {
		t.Fatalf("Completer got %v, want the reply once", c.got)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	NewReply(&wg).Done()
	wg.Wait() // returns: Done called wg.Done

	called := 0
	NewReplyFunc(func() { called++ }).Done()
	if called != 1 {
		t.Fatalf("NewReplyFunc's function called %d times, want 1", called)
	}
}

// TestReplyDoneAllocations: completing a reply allocates nothing, whatever
// its Completer (counted, not timed).
func TestReplyDoneAllocations(t *testing.T) {
	var wg sync.WaitGroup
	byWG := NewReply(&wg)
	n := 0
	byFunc := NewReplyFunc(func() { n++ })
	c := &counter{got: make([]*Reply, 0, 2000)}
	byTo := NewReplyTo(c)
	for name, done := range map[string]func(){
		"NewReply":     func() { wg.Add(1); byWG.Done(); wg.Wait() },
		"NewReplyFunc": byFunc.Done,
		"NewReplyTo":   func() { c.got = c.got[:0]; byTo.Done() },
	} {
		if a := testing.AllocsPerRun(1000, done); a != 0 {
			t.Errorf("%s: %.2f allocations per Done, want 0", name, a)
		}
	}
}
