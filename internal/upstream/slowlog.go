package upstream

import (
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// SLOWLOG GET in front of a Redis Cluster merges every master's entries
// (merge.go). Each master numbers its entries itself, from 0, so the
// merged ids repeat and are not in order across masters, and a tool that
// remembers the largest id it read and asks for newer entries (a slow log
// shipper, redis_exporter's slowlog_last_id) would skip those of a master
// whose count is behind. So the proxy gives each entry an id of its own:
// the same for an entry every time it is returned, unique across masters,
// and larger than every id given before for an entry returned for the
// first time (oldest first among those returned together). An entry is
// known by its master, its id and its timestamp (a restarted master
// numbers from 0 again).

// maxSlowIDs bounds the entries the proxy remembers; past it the oldest
// half is forgotten (a forgotten entry returned again gets a new id).
// Redis keeps 128 entries a master by default (slowlog-max-len).
const maxSlowIDs = 8192

// slowIDs are the proxy's ids of SLOWLOG entries. Its mu is a leaf.
type slowIDs struct {
	mu   sync.Mutex
	next int64
	ids  map[slowEntry]int64
}

// slowEntry is one master's entry.
type slowEntry struct {
	node     *Node
	id, when int64
}

// renumber returns the function slowlogMerge asks for an entry's id, for
// replies in the order of masters.
func (s *slowIDs) renumber(masters []*Node) fanout.Renumber {
	return func(part int, id, when int64) int64 {
		if part >= len(masters) {
			return id
		}
		e := slowEntry{masters[part], id, when}
		s.mu.Lock()
		defer s.mu.Unlock()
		if n, ok := s.ids[e]; ok {
			return n
		}
		if s.ids == nil {
			s.ids = make(map[slowEntry]int64)
		}
		if len(s.ids) >= maxSlowIDs {
			for k, n := range s.ids {
				if n < s.next-maxSlowIDs/2 {
					delete(s.ids, k)
				}
			}
		}
		n := s.next
		s.next++
		s.ids[e] = n
		return n
	}
}
