package protocol

import (
	"runtime/debug"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Continuing a request once its earlier replies are in (AfterReplies).
//
// A Handler that switches a client to another backend connection (SELECT,
// AUTH as another user, MULTI's and WATCH's pin, a slot's new master) or
// changes what later requests are checked by must let what the client sent
// before run first. On a goroutine the connection may simply wait for
// those replies. The event loop must not wait: the replies may be the
// loop's own to read, and every other client of the loop would wait too.
// So the Handler hands the rest of the request to AfterReplies, and on the
// loop the connection takes a detour: it dispatches and reads nothing more
// of the client's (its batch stays open, earlier replies complete into
// their slots as always), the loop goes on with its other clients, and
// when the last earlier reply is in, whoever completed it posts endDetour
// to the loop, which runs the rest there and goes on serving the
// connection's buffered requests in the same batch.
//
// The count is the batch's own (batch.left): AfterReplies takes the
// current request out of it, so when the loop lets go of the batch
// (startDetour) left is the earlier replies still to come, and the one
// that brings it to 0 is the last of them (slot.Complete, finishLater),
// exactly as for a batch left to its last reply (later.go), but for
// posting endDetour instead of writing. endDetour puts the current
// request and the loop's hold back.

// detour is a connection's continuation while it waits for earlier
// replies on the loop (see AfterReplies); then is nil when there is none.
// Set and cleared on the loop; read by finishLater, on the goroutine that
// completes the last earlier reply, after batch.left says so.
type detour struct {
	then func()
	// args is the request the continuation belongs to, for the log (still
	// valid: nothing more is read until it has run).
	args [][]byte
	// waiting: the loop let go of the batch (startDetour); endDetour
	// gives it back.
	waiting bool
	// work: the continuation waits for work on a goroutine too (OffLoop,
	// pending.go), which counts in batch.left until it is done.
	work bool
	// away: a goroutine serves the request (goroutinedetour.go); set and
	// cleared on the loop, read by the Handler's calls on that goroutine.
	away bool
	// ends: the goroutine detour's request ends its batch (nothing more
	// of the client's was buffered), which its goroutine lets go of
	// itself, so that its reply is written where it completes, without
	// waiting for the loop (goroutinedetour.go). Set on the loop before
	// the goroutine starts.
	ends bool
}

// AfterReplies runs then once every request dispatched before current
// (the request being served) has its reply; the connection dispatches
// nothing after current until then has returned. A Handler calls it
// before it switches a client to another backend connection or changes
// its state, so that requests sent before run first, and does the rest of
// the request (completing current among it) in then.
//
// On a goroutine (the goroutine transport's, or a goroutine detour's:
// goroutinedetour.go) it waits, then calls then. On the event loop then runs
// at once if nothing earlier is still to come; else later, on the loop,
// after ServeCommand has returned, once the earlier replies are in:
// ServeCommand must not touch the request after calling it.
func (c *Conn) AfterReplies(current *resp.Reply, then func()) {
	s := c.currentSlot(current, "AfterReplies")
	if c.onGoroutine() {
		c.waitReplies(s)
		then()
		return
	}
	if c.detour.then != nil {
		panic("protocol: AfterReplies twice for one request")
	}
	if c.earlierDone() {
		then() // the first of its batch, or its earlier replies are in
		return
	}
	// current leaves the count, so that left reaches 0 at the last
	// earlier reply once the loop lets go (startDetour); endDetour puts it
	// back before then runs.
	c.batch.left.Add(-1)
	c.detour.then = then
}

// currentSlot is current's slot, which must be the request being served.
func (c *Conn) currentSlot(current *resp.Reply, caller string) *slot {
	s := c.batch.replies[c.batch.n-1]
	if s.reply != current {
		panic("protocol: " + caller + " with a reply that is not the current request's")
	}
	return s
}

// earlierDone reports whether every request of the batch before the
// current one has its reply.
func (c *Conn) earlierDone() bool {
	for _, s := range c.batch.replies[:c.batch.n-1] {
		if !s.done.Load() {
			return false
		}
	}
	return true
}

// waitReplies waits, on the connection's goroutine, until every request
// dispatched before the one of slot s (the current one) has its reply.
func (c *Conn) waitReplies(s *slot) {
	if !s.late {
		s.late = true
		c.batch.late.Add(1)
		c.batch.wg.Done() // current is now counted in late
	}
	c.batch.wg.Wait()
}

// startDetour lets go of the batch of a connection whose request asked for
// AfterReplies, on the loop, after its dispatch: the loop serves its other
// clients until the earlier replies are in (endDetour). args is the
// request's.
func (c *Conn) startDetour(args [][]byte) {
	c.detour.waiting, c.detour.args = true, args
	if c.batch.left.Add(-1) == 0 {
		c.endDetour() // they came in meanwhile
	}
}

// cancelDetour drops a continuation not started yet: its request panicked
// (dispatch), and current goes back in the count before it is completed.
func (c *Conn) cancelDetour() {
	if c.detour.then == nil || c.detour.waiting {
		return
	}
	c.batch.left.Add(1)
	if !c.detour.work {
		c.detour.then, c.detour.args = nil, nil
	}
	// OffLoop's work is under way and leaves the count when it is done:
	// the detour goes on, and its continuation finds current answered.
}

// detourDone is finishLater's hook: the last earlier reply of a detour is
// in, and the loop runs the continuation (endDetour). It reports whether
// it was that.
func (c *Conn) detourDone() bool {
	if c.detour.then == nil {
		return false
	}
	c.lp.loop.Post(c.endDetour)
	return true
}

// endDetour runs a continuation, on the loop, once every earlier reply is
// in, and goes on serving the connection: the request's own checks
// (afterDispatch), then what the client sent after it.
func (c *Conn) endDetour() {
	then, args := c.detour.then, c.detour.args
	c.detour = detour{}
	// The loop's hold and current's reply, still to come (but after a
	// panic during OffLoop's work: cancelDetour).
	if c.batch.replies[c.batch.n-1].done.Load() {
		c.batch.left.Store(1)
	} else {
		c.batch.left.Store(2)
	}
	c.runDetour(then, args)
	if c.detour.then != nil {
		// The rest waits for work of its own (OffLoop): a detour again.
		c.startDetour(args)
		return
	}
	if c.afterDispatch(args) {
		c.serveLoop()
	}
}

// runDetour runs then as dispatch runs a request: a panic is answered and
// logged, and the connection closed after the batch.
func (c *Conn) runDetour(then func(), args [][]byte) {
	defer func() {
		if r := recover(); r != nil {
			c.panicked(r, args)
		}
	}()
	then()
}

// panicked answers the current request after a panic of its Handler's
// (see dispatch).
func (c *Conn) panicked(r any, args [][]byte) {
	c.cancelDetour()
	c.server.Logger.Error("panic serving a request; the client's connection is closed", "panic", r,
		"command", clipCommand(args), "stack", string(debug.Stack()))
	c.closeAfterReply = true
	if s := c.batch.replies[c.batch.n-1]; !s.done.Load() {
		// A Done the Handler arranged elsewhere may still race this one;
		// the slot takes the first (Complete).
		p := s.reply
		p.Buf, p.Err = p.Buf[:0], errPanicked
		p.Done()
	}
}
