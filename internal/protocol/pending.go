package protocol

import (
	"fmt"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Work that may wait, off the loop, and the rest of the request on it
// (OffLoop).
//
// Some requests need something that takes a wait before they go on: a
// dial (a connection of the client's own for MULTI, WATCH, WAIT or a
// blocking command when no spare one is open), a round trip on a
// connection of its own (AUTH that Redis checks). A goroutine may simply
// wait; the event loop must not. So the Handler hands the waiting part to
// OffLoop, which runs it on a goroutine of its own, and the rest, which
// that part returns, runs on the loop once it is done, as a detour's
// continuation (detour.go) does: the connection dispatches and reads
// nothing more of the client's meanwhile (its batch stays open, earlier
// replies complete into their slots), and the loop serves its other
// clients.
//
// It is a detour whose wait counts one more thing than the earlier
// replies: the work. OffLoop takes the current request out of the batch's
// count (batch.left) and puts the work in, so left reaches 0 once the
// earlier replies are in, the loop let go of the batch (startDetour) and
// the work is done; whoever brings it there (a backend reader, the work's
// goroutine, startDetour) has the loop run the continuation (endDetour).

// OffLoop runs work and then the function it returns (then may be nil),
// for the request being served (current), then once work has returned
// and every request dispatched before current has its reply; the
// connection dispatches nothing after current until then has returned.
// On a goroutine (the goroutine transport's, or a goroutine detour's) both
// run there, with the wait for the earlier replies between them. On the event loop work runs on a goroutine of its own
// and then later, on the loop, after ServeCommand (or the continuation
// OffLoop was called from) has returned: OffLoop must be the caller's last
// act on the request, and work must not touch the connection (it may read
// what nothing changes meanwhile: the client's state, frozen while the
// connection waits) and must end in bounded time (a dial's timeout), since
// the client waits for it.
func (c *Conn) OffLoop(current *resp.Reply, work func() (then func())) {
	s := c.currentSlot(current, "OffLoop")
	if c.onGoroutine() {
		then := work()
		c.waitReplies(s) // as on the loop: then runs after the earlier replies
		if then != nil {
			then()
		}
		return
	}
	if c.detour.then != nil {
		panic("protocol: OffLoop with a continuation pending for the request")
	}
	var then func() // set by work's goroutine before it leaves the count
	c.detour.then = func() {
		if then != nil {
			then()
		}
	}
	c.detour.work = true
	// current leaves the count and work joins it: endDetour runs once
	// both the earlier replies and work are done.
	go func() {
		then = runWork(work)
		if c.batch.left.Add(-1) == 0 {
			c.finishLater() // detourDone: endDetour on the loop
		}
	}()
}

// runWork runs work and returns its continuation; a panic of work's
// becomes the continuation's, on the loop, where it is answered and
// logged as a request's panic (runDetour).
func runWork(work func() func()) (then func()) {
	defer func() {
		if r := recover(); r != nil {
			then = func() { panic(fmt.Sprint(r)) }
		}
	}()
	return work()
}
