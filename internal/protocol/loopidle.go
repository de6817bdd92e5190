package protocol

import "time"

// The idle timeout (Server.IdleTimeout, Redis's timeout) for clients on the
// event loop.
//
// A client on a goroutine gets a read deadline IdleTimeout away each time
// its goroutine reads (clientReader); a socket on the loop is not in Go's
// poller, so it has no deadlines. Instead the loop keeps a list of its
// clients (loopIdle) and sweeps it from a timer, as Redis's clientsCron
// visits each client about once a second: a client that waits for a
// request (no batch in flight, c.later false) and has been quiet for
// IdleTimeout is closed as the goroutine path closes it (limitClosed,
// closeIdle). Quiet is counted, as on a goroutine, from the later of its
// last read that brought bytes (c.readAt, in the middle of a request too)
// and the moment it was last waited for: when its last batch was written
// (resume), when it came to the loop (toLoop: accepted, or given back by
// its goroutine, whose deadline would have been armed then). A blocked
// client's batch is in flight; a subscribed client (TakeWrites) leaves the
// sweep for good, as Redis exempts both.
//
// The sweep runs every idleSweepEvery(IdleTimeout) (a quarter of the
// timeout, at most a second), while the loop has clients: a client is
// closed between IdleTimeout and IdleTimeout plus that interval after it
// went quiet. A timer wheel would close it sooner and visit fewer clients,
// but a timer per client per request is what the loop saves, and one pass
// over ten thousand clients a second costs microseconds.

// loopIdle is the list of a server's clients on its loop, for the idle
// sweep. Touched on the loop only (invariant 1).
type loopIdle struct {
	clients []*loopClient
	timer   *time.Timer // posts sweepFn to the loop
	armed   bool        // timer is set to fire
	sweepFn func()      // Server.sweepIdle, bound once
}

// idleSweepEvery is how often the loop looks for idle clients.
func idleSweepEvery(timeout time.Duration) time.Duration {
	return max(min(timeout/4, time.Second), time.Millisecond)
}

// trackIdle adds lc to the idle sweep (if the server has an idle timeout).
// On the loop.
func (lc *loopClient) trackIdle() {
	s := lc.c.server
	if s.IdleTimeout <= 0 {
		return
	}
	li := &s.loopIdle
	lc.idleIdx = len(li.clients)
	li.clients = append(li.clients, lc)
	s.armIdleSweep()
}

// untrackIdle takes lc off the idle sweep, if it is on it. On the loop.
func (lc *loopClient) untrackIdle() {
	if lc.idleIdx < 0 {
		return
	}
	li := &lc.c.server.loopIdle
	last := len(li.clients) - 1
	moved := li.clients[last]
	li.clients[lc.idleIdx] = moved
	moved.idleIdx = lc.idleIdx
	li.clients[last] = nil
	li.clients = li.clients[:last]
	lc.idleIdx = -1
}

// armIdleSweep sets the sweep's timer, if it is not set. On the loop.
func (s *Server) armIdleSweep() {
	li := &s.loopIdle
	if li.armed {
		return
	}
	li.armed = true
	every := idleSweepEvery(s.IdleTimeout)
	if li.timer == nil {
		loop := s.Loop
		li.sweepFn = s.sweepIdle
		li.timer = time.AfterFunc(every, func() { loop.Post(li.sweepFn) })
		return
	}
	li.timer.Reset(every)
}

// sweepIdle closes the loop's clients idle for IdleTimeout and sets the
// timer again while clients are left. Posted to the loop by the timer.
func (s *Server) sweepIdle() {
	li := &s.loopIdle
	li.armed = false
	now := time.Now()
	for i := 0; i < len(li.clients); {
		lc := li.clients[i]
		if !lc.idle(now, s.IdleTimeout) {
			i++
			continue
		}
		s.limitClosed(lc.c, closeIdle, "closing idle client", "timeout", s.IdleTimeout)
		lc.stop() // takes it off the list: clients[i] is another now
	}
	if len(li.clients) > 0 {
		s.armIdleSweep()
	}
}

// idle reports whether the client waits for a request and has been quiet
// for timeout at now. On the loop.
func (lc *loopClient) idle(now time.Time, timeout time.Duration) bool {
	c := lc.c
	if lc.stopped || c.later || c.detour.then != nil || c.detour.away || c.closing.Load() || c.killed.Load() {
		return false // a batch in flight, or closing anyway
	}
	quiet := lc.idleFrom
	if c.readAt.After(quiet) {
		quiet = c.readAt
	}
	return now.Sub(quiet) >= timeout
}
