package locks

import (
	"container/heap"
	"context"
	"strconv"
	"sync"
	"time"
)

// leases remembers the leases this proxy granted and has not yet seen end,
// ordered by when they run out, so that one that runs out without a release
// is noticed soon after (the slow-lock log's "expired" entries) and INFO can
// tell how many locks are held. Redis forgets an expired record silently;
// nothing else would notice.
//
// It is bounded (maxTracked): past that, grants go untracked (counted), so
// a load of millions of short leases costs a few megabytes here, not one
// entry each. Every change to a resource's entry happens under that
// resource's serializer, which is also what the sweeper holds while it
// checks Redis, so a release racing the lease's end is never reported as an
// expiry. Lock order: a resource's serializer, then leases.mu (never the
// other way round).
type leases struct {
	mu        sync.Mutex
	byRes     map[string]*lease
	queue     leaseHeap
	untracked uint64
	kick      chan struct{} // capacity 1: the earliest end moved earlier
	onChange  func(tracked int)
}

// maxTracked bounds the leases remembered at once (about 150 bytes each).
const maxTracked = 1 << 16

type lease struct {
	resource string
	token    uint64
	acquired time.Time
	ends     time.Time // the last known end of the lease
	addr     string
	index    int // in the heap; -1 when out of it (being checked)
}

type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].ends.Before(h[j].ends) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) { l := x.(*lease); l.index = len(*h); *h = append(*h, l) }
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}

// granted starts tracking a new lease, the resource's serializer held. It
// returns the resource's previous tracked lease if that one had run out
// unseen (so the caller logs it as expired).
func (ls *leases) granted(resource string, token uint64, acquired, ends time.Time, addr string) (expired *lease) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	defer ls.changedLocked()
	if old := ls.byRes[resource]; old != nil {
		ls.dropLocked(old)
		// Its token is no longer the resource's: it ran out, unless it
		// ended before its known end without this proxy seeing how
		// (released through another proxy): nothing to report then. The
		// slack absorbs the proxy's clock running a little ahead of
		// Redis's expiry.
		if !old.ends.After(acquired.Add(expirySlack)) {
			expired = old
		}
	}
	if len(ls.byRes) >= maxTracked {
		ls.untracked++
		return expired
	}
	l := &lease{resource: resource, token: token, acquired: acquired, ends: ends, addr: addr}
	ls.byRes[resource] = l
	heap.Push(&ls.queue, l)
	if l.index == 0 {
		ls.kickLocked()
	}
	return expired
}

// rearmed moves a tracked lease's end (a renewal or same-owner re-acquire).
func (ls *leases) rearmed(resource string, token uint64, ends time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.byRes[resource]; l != nil && l.token == token {
		l.ends = ends
		if l.index >= 0 {
			heap.Fix(&ls.queue, l.index)
		}
	}
}

// released forgets the lease with token, if tracked.
func (ls *leases) released(resource string, token uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.byRes[resource]; l != nil && l.token == token {
		ls.dropLocked(l)
		ls.changedLocked()
	}
}

func (ls *leases) changedLocked() {
	if ls.onChange != nil {
		ls.onChange(len(ls.byRes))
	}
}

func (ls *leases) dropLocked(l *lease) {
	delete(ls.byRes, l.resource)
	if l.index >= 0 {
		heap.Remove(&ls.queue, l.index)
	}
}

func (ls *leases) kickLocked() {
	select {
	case ls.kick <- struct{}{}:
	default:
	}
}

// counts returns the leases tracked now and the grants never tracked.
func (ls *leases) counts() (tracked int, untracked uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.byRes), ls.untracked
}

// nextDue pops the earliest lease if it ended before now, else returns
// how long until it does (an hour if there is none).
func (ls *leases) nextDue(now time.Time) (*lease, time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.queue) == 0 {
		return nil, time.Hour
	}
	l := ls.queue[0]
	if d := l.ends.Sub(now); d > 0 {
		return nil, d
	}
	heap.Pop(&ls.queue)
	return l, 0
}

// expirySlack is how long after a lease's known end the sweeper looks:
// Redis counts the lease from when the script ran, a little after the
// proxy's clock started it.
const expirySlack = 5 * time.Millisecond

// sweep runs for the life of the process: at each tracked lease's end it
// asks Redis whether the record is still there, and logs an expiry if not.
func (m *Manager) sweep() {
	timer := time.NewTimer(time.Hour)
	for {
		l, wait := m.leases.nextDue(time.Now().Add(-expirySlack))
		if l == nil {
			timer.Reset(wait + expirySlack)
			select {
			case <-timer.C:
			case <-m.leases.kick:
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
			}
			continue
		}
		m.checkLease(l)
	}
}

// checkLease decides whether l, past its known end, ran out: under the
// resource's serializer (no grant, renewal or release of it in between),
// it reads the record. The same token still there means it was renewed
// where this proxy could not see (another fenceproxy) or Redis started it a
// little late: it is tracked again until its new end.
func (m *Manager) checkLease(l *lease) {
	turn := m.serial.lock(l.resource)
	defer m.serial.unlock(l.resource, turn)
	m.leases.mu.Lock()
	current := m.leases.byRes[l.resource] == l
	m.leases.mu.Unlock()
	if !current {
		return // released or replaced meanwhile
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	rec, held, err := m.readRecord(ctx, l.resource)
	cancel()
	left := rec.LeaseLeft
	alive := held && rec.Token == strconv.FormatUint(l.token, 10) && left > 0
	m.leases.mu.Lock()
	if err != nil || alive {
		// Alive, or unknown (Redis unreachable: look again shortly).
		if err != nil {
			left = time.Second
		}
		l.ends = time.Now().Add(left)
		heap.Push(&m.leases.queue, l)
		m.leases.mu.Unlock()
		return
	}
	delete(m.leases.byRes, l.resource)
	m.leases.changedLocked()
	m.leases.mu.Unlock()
	m.logExpired(l)
}

func (m *Manager) logExpired(l *lease) {
	m.opts.Metrics.LockExpirations.Inc()
	m.slowEntry(SlowEntry{
		Time: l.ends, Duration: l.ends.Sub(l.acquired), Kind: SlowExpired,
		Resource: l.resource, Token: l.token, ClientAddr: l.addr,
	})
}
