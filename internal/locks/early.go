package locks

import (
	"sync"
	"time"
)

// An early reservation starts the fsync of a grant's candidate token before
// the grant's script is sent, where the grant is likely to be fresh: the
// disk's sync then runs beside the script's round trip and the replicas'
// WAIT, where a reservation made on the script's reply adds the time of
// one sync to every grant (about 2 ms per grant on this project's test
// machines, more than a WAIT to a replica on loopback). A grant that turns
// out not to be fresh (busy, a re-entry) cancels it, which is one unsynced
// write; so only a resource with no lease of this proxy's running gets
// one: a hot resource's attempts, mostly busy, reserve on the reply as
// before. The reservation is the same Store.Reserve, only earlier: a token
// reserved and then not granted is cancelled, one whose grant's outcome is
// unknown counts as issued (persist's invariant 7), as before.
type earlyReserve struct {
	resource string
	token    uint64
	done     chan struct{}
	err      error
	dropped  sync.Once
}

// reserveEarly starts reserving token for resource unless a lease of the
// resource is running (nil then: reserve on the reply).
func (m *Manager) reserveEarly(resource string, token uint64) *earlyReserve {
	if m.leases.running(resource, time.Now()) {
		return nil
	}
	e := &earlyReserve{resource: resource, token: token, done: make(chan struct{})}
	go func() {
		e.err = m.opts.Store.Reserve(resource, token)
		close(e.done)
	}()
	return e
}

// wait returns the reservation's outcome once it is on disk.
func (e *earlyReserve) wait() error {
	<-e.done
	return e.err
}

// dropEarly cancels an early reservation whose token no grant took (nil:
// none), once however often it is called.
func (m *Manager) dropEarly(e *earlyReserve) {
	if e == nil {
		return
	}
	e.dropped.Do(func() {
		if e.wait() == nil {
			m.opts.Store.Cancel(e.resource, e.token)
		}
	})
}
