package locks

import (
	"sort"
	"sync"
)

// topK counts contention (acquires that found the resource held) per
// resource with the Space-Saving algorithm: at most k counters, however many
// resources exist, so a hot resource is found without per-resource memory
// or metric labels. A count may overstate a resource by the count it took
// over (at most the smallest count when it entered).
type topK struct {
	mu     sync.Mutex
	k      int
	counts map[string]uint64
}

func newTopK(k int) *topK { return &topK{k: k, counts: make(map[string]uint64, k)} }

// add counts one contended acquire of resource.
func (t *topK) add(resource string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.counts[resource]; ok || len(t.counts) < t.k {
		t.counts[resource]++
		return
	}
	// Full: the new resource takes over the smallest counter.
	var minKey string
	minCount := ^uint64(0)
	for key, n := range t.counts {
		if n < minCount {
			minKey, minCount = key, n
		}
	}
	delete(t.counts, minKey)
	t.counts[resource] = minCount + 1
}

// Contended is one resource's contention count.
type Contended struct {
	Resource string
	Count    uint64
}

// top returns the n most contended resources, most first.
func (t *topK) top(n int) []Contended {
	t.mu.Lock()
	out := make([]Contended, 0, len(t.counts))
	for key, c := range t.counts {
		out = append(out, Contended{key, c})
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Resource < out[j].Resource
	})
	return out[:min(n, len(out))]
}
