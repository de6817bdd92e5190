package protocol

// Giving a client back to the loop without a post.
//
// A batch left to its last reply is written by whoever completes that
// reply: the loop itself when Redis's reply was read there, or another
// goroutine (a lock worker, a pinned connection's reader, a cluster
// master's). That goroutine used to post resume to the loop after every
// batch, which wakes a loop waiting in epoll_wait: an eventfd write and a
// wake-up per request, what a client goroutine's wake-up used to cost
// (measured: the lock family on the loop spent 1.04x the CPU per lock
// cycle of its goroutines with a post per request).
//
// Most batches need nothing of the loop once written: the client sent
// nothing more (its socket drained, nothing buffered), and nothing
// happened to it meanwhile. The loop says so when it ends the batch
// (quiet: held = heldByBatch). The completer then gives the connection
// back with one compare-and-swap (heldByBatch -> heldByLoop) and no post;
// the loop takes it at its next entry for the client (reclaim: the next
// readiness edge, an interrupt), which is when it would have had anything
// to do for it. Anything the loop learns of the client while the batch is
// in flight (an edge with bytes or the end, Kill, Shutdown) first swaps
// heldByBatch for heldWanted (want), so the completer's swap fails and it
// posts resume as before: whichever comes first, the loop serves the
// client once its batch is written, exactly once.

// Who holds a connection on the loop while a batch is in flight (held).
const (
	// heldByLoop: no batch in flight, or the completer of a quiet one gave
	// the connection back (c.later may still say otherwise until reclaim).
	heldByLoop int32 = iota
	// heldByBatch: a quiet batch in flight; its completer gives it back
	// without a post.
	heldByBatch
	// heldWanted: a batch in flight after which the loop must run resume.
	heldWanted
)

// quiet reports whether the batch the loop is ending needs nothing of the
// loop once written: nothing buffered or left in the socket, no end seen,
// no limit or timer to apply, no outbox (a stream or pushes, which the
// loop writes after the batch: loopoutbox.go). On the loop.
func (lc *loopClient) quiet() bool {
	c := lc.c
	return c.rd.Buffered() == 0 && !lc.edge.MayRead() && (lc.tls == nil || lc.tlsDry) &&
		!lc.eof && !lc.hungUp && !lc.closeNow && !c.mayBlock && c.outbox == nil &&
		c.server.IdleTimeout == 0 && !c.closing.Load() && !c.killed.Load()
}

// want makes the writer of the batch in flight post resume, and reports
// whether it will: false if the writer gave the connection back between
// the caller's reclaim and this (the caller then reclaims it and serves
// what it came for: no resume follows). On the loop, while c.later.
func (lc *loopClient) want() bool {
	for {
		switch lc.held.Load() {
		case heldWanted:
			return true
		case heldByBatch:
			if lc.held.CompareAndSwap(heldByBatch, heldWanted) {
				return true
			}
		default: // heldByLoop: given back meanwhile
			return false
		}
	}
}

// inFlight reports whether the connection's batch is still in flight, on
// the loop: it takes back one whose writer gave it back (reclaim), and for
// one still in flight, with wanted, makes its writer post resume (want).
func (lc *loopClient) inFlight(wanted bool) bool {
	if !lc.c.later || lc.reclaim() {
		return false
	}
	if testHookInFlight != nil {
		testHookInFlight()
	}
	if wanted && !lc.want() {
		lc.reclaim() // given back between the two looks
		return false
	}
	return true
}

// reclaim takes back, on the loop, a connection whose quiet batch's
// completer gave it back without a post, and reports whether the loop
// holds it now (false: the batch is still in flight).
func (lc *loopClient) reclaim() bool {
	if lc.held.Load() != heldByLoop {
		return false
	}
	lc.reclaimed()
	return true
}

// reclaimed is resume's bookkeeping: the batch is written, and the loop
// waits for the client again.
func (lc *loopClient) reclaimed() {
	c := lc.c
	c.later = false
	c.mayBlock = false
	lc.held.Store(heldByLoop)
	lc.idleFrom = lc.loop.Now()
}

// testHookInFlight and testHookGiveBack, if set (by tests only), run
// between inFlight's two looks at held, and before a batch's writer gives
// the connection back (doneLater): the window of their race, widened.
var testHookInFlight, testHookGiveBack func()
