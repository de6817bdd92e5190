package locks

import (
	"strconv"
	"testing"
)

// TestTopKFindsHotResourcesInBoundedMemory: among 100,000 resources touched
// once, the few touched often come out on top, and the sketch never holds
// more than k counters.
func TestTopKFindsHotResourcesInBoundedMemory(t *testing.T) {
	tk := newTopK(64)
	for i := 0; i < 100000; i++ {
		tk.add("cold:" + strconv.Itoa(i))
		if i%10 == 0 {
			tk.add("hot:a")
		}
		if i%20 == 0 {
			tk.add("hot:b")
		}
		if len(tk.counts) > 64 {
			t.Fatalf("sketch holds %d counters, bound 64", len(tk.counts))
		}
	}
	top := tk.top(2)
	if len(top) != 2 || top[0].Resource != "hot:a" || top[1].Resource != "hot:b" {
		t.Fatalf("top 2 = %+v, want hot:a then hot:b", top)
	}
	if top[0].Count < 10000 {
		t.Fatalf("hot:a counted %d, at least its 10000 contended acquires", top[0].Count)
	}
}
