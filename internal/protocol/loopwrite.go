package protocol

import (
	"errors"
	"os"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
)

// Writing a batch on the event loop when the socket does not take it at
// once.
//
// A batch of a client on the loop is written where its last reply
// completes it (finishLater: on the loop, or on the goroutine that
// completed it), with one write that never waits. Most often the socket
// takes it all. When it does not (a client that reads slowly, a reply
// bigger than the socket's buffer), the rest stays with the loopClient:
// the plaintext batch in c.out from lc.w.off on, a TLS client's encrypted
// rest in its transport's outbox (tlsloop.go). The loop writes more each
// time the socket says it has room (a readiness edge with Out: netloop's
// invariant 3), and the batch stays in flight (c.later) until the rest is
// written: the loop reads and dispatches nothing of the client's meanwhile
// (invariant 2), and resume gives it back, as for any batch. The client
// stays on the loop, on the same descriptor, counted in loop_clients.
//
// The limits are those of a goroutine's write (Conn.writeTo), with the
// loop's timing: the normal class's soft limit (a rest above Soft when
// the loop takes the write on has SoftFor to go under it, or the client
// is closed, with the same log line and count: overLimit) and the
// server's WriteTimeout for the whole batch, counted from then. The hard
// limit is checked as the batch is collected, before any write. A timer
// per waiting write posts a check to the loop at its next deadline, since
// a client that reads nothing brings no edge. A client killed, or past
// Shutdown's time, while its write waits is closed on the loop at once;
// one that hangs up makes its socket fail the next write (the hang-up's
// edge has Out set), and is closed then.

// loopWrite is the state of a batch's write that waits for room, on the
// loop (invariant 1), but for off, which finishLater's goroutine sets
// before it posts startFn.
type loopWrite struct {
	pending bool // a batch's rest waits for room (c.later holds)
	off     int  // plaintext: c.out[off:] is the rest
	// softEnd is when the rest must be under the soft limit, zero when
	// it is (or there is none); end is WriteTimeout's end, zero if none.
	softEnd, end time.Time
	timer        *time.Timer // posts checkFn at the next of the two
	// lim and class are the output limits the rest is held to: the
	// normal class's for a batch, the pubsub class's for a stream's
	// outbox (loopoutbox.go).
	lim     OutputLimit
	class   string
	startFn func() // startWrite, bound once (toLoop)
	checkFn func() // checkWrite, bound once (toLoop)
}

// errWriteAbandoned ends a waiting write of a client that was killed, or
// outlasted Shutdown: it is closed with its batch part written.
var errWriteAbandoned = errors.New("protocol: the client was closed with its reply partly written")

// writeBatch is finishLater's write of the collected batch (c.out) for a
// client on the loop, on the loop or on the goroutine that completed the
// batch (the loop does not touch the connection meanwhile: invariant 2).
// What the socket does not take is left to the loop (startWrite).
func (lc *loopClient) writeBatch() {
	c := lc.c
	if lc.tls != nil {
		all, err := lc.writeTLS(c.out)
		c.out = c.out[:0] // encrypted: the rest is in the outbox
		if err != nil || all {
			c.dropBigOut()
			c.doneLater(err)
			return
		}
	} else {
		written, err := lc.writeNow(c.out)
		if err != nil || written == len(c.out) {
			c.dropBigOut()
			c.doneLater(err)
			return
		}
		lc.w.off = written
	}
	lc.loop.Post(lc.w.startFn)
}

// startWrite takes on the rest of a batch the socket did not take, on the
// loop: it arms the write's deadlines and writes what room there is now
// (an edge that came before this ran was not taken).
func (lc *loopClient) startWrite() {
	lc.startWriteUnder(lc.c.server.NormalOutput, "normal", true)
}

// startWriteUnder is startWrite for a rest held to lim (of class), and to
// the server's WriteTimeout if timeout.
func (lc *loopClient) startWriteUnder(lim OutputLimit, class string, timeout bool) {
	c := lc.c
	c.mayBlock = false // the batch's reply is in: nothing blocks now
	lc.w.pending = true
	lc.w.lim, lc.w.class = lim, class
	if lc.gone.Load() || lc.closeNow {
		// Killed, hung up or shut down while blocked, or killed since:
		// the rest is for nobody.
		lc.endWrite(errWriteAbandoned)
		return
	}
	now := lc.loop.Now()
	lc.w.end, lc.w.softEnd = time.Time{}, time.Time{}
	if d := c.server.WriteTimeout; d > 0 && timeout {
		lc.w.end = now.Add(d)
	}
	if lim.Soft > 0 && int64(lc.unwritten()) > lim.Soft {
		lc.w.softEnd = now.Add(lim.SoftFor)
	}
	lc.writeMore(now)
}

// checkWrite is the write's timer, posted to the loop at a deadline.
func (lc *loopClient) checkWrite() {
	if lc.w.pending {
		lc.writeMore(time.Now())
	}
}

// writeMore writes what the socket takes of the rest, on the loop, and
// ends the write once it is all written, the socket fails, or a limit is
// passed at now; else it waits for the next edge (Ready) or deadline.
func (lc *loopClient) writeMore(now time.Time) {
	all, err := lc.writeRest()
	if err == nil && !all {
		err = lc.overWriteLimit(now)
	}
	if err != nil || all {
		lc.endWrite(err)
		return
	}
	lc.armWriteTimer(now)
}

// writeRest writes the rest until the socket is full, and reports whether
// it is all written.
func (lc *loopClient) writeRest() (all bool, err error) {
	if lc.tls != nil {
		left, err := lc.c.tio.flushOutbox()
		return left == 0, err
	}
	out := lc.c.out
	for lc.w.off < len(out) {
		n, err := netloop.Write(lc.fd, out[lc.w.off:])
		if err == netloop.ErrWouldBlock {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		lc.w.off += n
	}
	return true, nil
}

// unwritten is the client's output buffer while its write waits: the
// bytes the socket has not taken.
func (lc *loopClient) unwritten() int {
	if lc.tls != nil {
		return lc.c.tio.pendingBytes()
	}
	return len(lc.c.out) - lc.w.off
}

// overWriteLimit is the error that closes a client whose waiting write
// passed a limit at now (as Conn.writeTo's deadlines would on a
// goroutine), nil if none.
func (lc *loopClient) overWriteLimit(now time.Time) error {
	c := lc.c
	if !lc.w.softEnd.IsZero() {
		left := int64(lc.unwritten())
		switch {
		case left <= lc.w.lim.Soft:
			// Back under the soft limit in time: the rest may take as
			// long as it takes (the buffer only shrinks).
			lc.w.softEnd = time.Time{}
		case !now.Before(lc.w.softEnd):
			return c.overLimit(&errOutputLimit{lc.w.class, "soft", left})
		}
	}
	if !lc.w.end.IsZero() && !now.Before(lc.w.end) {
		return os.ErrDeadlineExceeded // as a goroutine's write deadline
	}
	return nil
}

// armWriteTimer sets the write's timer to its next deadline, if it has
// one.
func (lc *loopClient) armWriteTimer(now time.Time) {
	next := lc.w.softEnd
	if next.IsZero() || (!lc.w.end.IsZero() && lc.w.end.Before(next)) {
		next = lc.w.end
	}
	if next.IsZero() {
		return
	}
	d := next.Sub(now)
	if lc.w.timer == nil {
		loop, check := lc.loop, lc.w.checkFn
		lc.w.timer = time.AfterFunc(d, func() { loop.Post(check) })
		return
	}
	lc.w.timer.Reset(d)
}

// endWrite ends a waiting write with its outcome: resume gives the loop
// the connection back (and closes it on an error).
func (lc *loopClient) endWrite(err error) {
	lc.w.pending = false
	lc.w.off = 0
	if lc.w.timer != nil {
		lc.w.timer.Stop()
	}
	lc.c.dropBigOut()
	lc.c.doneLater(err)
}

// writeReady serves a readiness edge while a write waits: room (or a
// broken socket, which the write then finds). On the loop.
func (lc *loopClient) writeReady(ev netloop.Events) {
	if ev&netloop.Out != 0 {
		lc.writeMore(lc.loop.Now())
	}
}

// abandonWrite closes a client killed (or past Shutdown's time) while its
// write waits, on the loop.
func (lc *loopClient) abandonWrite() {
	if lc.w.pending {
		lc.endWrite(errWriteAbandoned)
	}
}
