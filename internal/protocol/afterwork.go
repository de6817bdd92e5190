package protocol

import "github.com/fenceproxy/fenceproxy/internal/resp"

// AfterWork runs work where it may block (it dials a connection, say),
// then then, once work has returned and every request dispatched before
// current (the request being served) has its reply; the connection
// dispatches nothing after current until then has returned. It is
// AfterReplies with a slow step first: a subscribing Handler opens its
// connection to Redis in work and takes the client's writes in then.
//
// On a goroutine (the goroutine transport's, or a goroutine detour's:
// goroutinedetour.go) it calls work, waits for the earlier replies, then calls
// then. On the event loop work runs on a goroutine of its own, while the
// loop serves its other clients, and then runs later on the loop, as
// AfterReplies' continuation does (detour.go): ServeCommand must not touch
// the request after calling it, and work must not touch the connection.
// A panic in work is the request's (answered and logged as dispatch does).
func (c *Conn) AfterWork(current *resp.Reply, work, then func()) {
	s := c.currentSlot(current, "AfterWork")
	if c.onGoroutine() {
		work()
		c.waitReplies(s)
		then()
		return
	}
	if c.detour.then != nil {
		panic("protocol: AfterWork during another continuation of one request")
	}
	var panicked any
	c.detour.then = func() {
		if panicked != nil {
			panic(panicked) // runDetour answers it
		}
		then()
	}
	// current stays in the batch's count (left) until work returns, so
	// that left reaches 0 once work is done and the earlier replies are
	// in, after startDetour lets go of the loop's hold: whoever brings it
	// there posts endDetour (finishLater, detourDone), which puts current
	// back in the count before then runs.
	go func() {
		defer func() {
			if r := recover(); r != nil {
				panicked = r
			}
			if c.batch.left.Add(-1) == 0 {
				c.finishLater()
			}
		}()
		work()
	}()
}
