package protocol

import (
	"sync"
	"sync/atomic"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// slot is one reply of a batch: the resp.Reply handed to the Handler for
// one request, which tells the slot when it is done (Complete).
type slot struct {
	reply *resp.Reply
	batch *batch
	// late is true once waitReplies (AfterReplies, TakeWrites, on a
	// goroutine) moved the reply from batch.wg to batch.late.
	late bool
	// done is set by the first Complete: a request whose Handler panicked
	// is completed by the connection (Conn.dispatch), and a Done that the
	// Handler had arranged before panicking may still come.
	done atomic.Bool
	// silent: the reply is awaited in order but not written (see
	// Conn.SetSilent). Set before the request leaves the connection's
	// goroutine, so Complete reads it after.
	silent bool
	// pre are pushes that Redis sent before this reply (push.go), written
	// ahead of it; guarded by the connection's pushes.mu.
	pre []byte
}

// Complete is the end of every reply to a client: an error value becomes
// its bytes here (see appendErr), the reply is counted against the output
// limits, and the batch learns that one more is in. It runs on whichever
// goroutine completes the reply (the connection's own, a backend reader, a
// lock worker), and allocates nothing for a reply of bytes.
func (s *slot) Complete(r *resp.Reply) {
	if s.done.Swap(true) {
		return
	}
	b := s.batch
	if s.silent {
		r.Buf, r.Err = r.Buf[:0], nil
	}
	if r.Err != nil {
		// The slot holds this request's reply only: nothing else to keep.
		r.Buf = b.conn.server.appendErr(r.Buf[:0], r.Err)
		r.Err = nil
	}
	b.out.add(r)
	wg := &b.wg
	if s.late {
		wg = &b.late
	}
	// left reaches 0 only for a batch its connection left to be written by
	// whoever completes it (see Conn.writeLater), or the last earlier
	// reply of a detour (AfterReplies): this is that one.
	last := b.left.Add(-1) == 0
	wg.Done()
	if last {
		b.conn.finishLater()
	}
}

// maxRetainedReply is the largest reply buffer a connection keeps for reuse;
// a larger one (a big GET, say) is dropped so idle connections stay small.
const maxRetainedReply = 64 << 10

// batch is the ordered list of replies a connection owes its client.
type batch struct {
	wg      sync.WaitGroup // replies of the batch still to come
	late    sync.WaitGroup // those moved out of wg by Conn.waitReplies
	replies []*slot
	n       int
	out     *outCount
	// left is the replies still to come, plus 1 while the connection's
	// goroutine holds the batch (it always does, except while a batch is
	// left to its last reply to write: see Conn.writeLater). On the loop,
	// during a detour (detour.go), it counts only the replies before the
	// current request's.
	left atomic.Int64
	conn *Conn
}

// outCount adds up the bytes of a batch's completed replies while they
// arrive, so a connection notices its output buffer crossing the hard limit
// (or growing past maxBatchBytes) without waiting for all of them.
type outCount struct {
	bytes   atomic.Int64
	replies atomic.Int64 // how many replies the bytes are of
	crossed atomic.Int64 // the count when it first went over, for the log
	hard    int64        // the normal class's hard limit; 0: none
	flushAt int64        // write the batch once this much is in
}

// add counts p's reply. Past the hard limit the reply is dropped at once:
// the connection is going to be closed without it, and the proxy must not
// hold what a client that does not read would make it hold.
func (o *outCount) add(p *resp.Reply) {
	o.replies.Add(1)
	if n := o.bytes.Add(int64(len(p.Buf))); o.hard > 0 && n > o.hard {
		o.crossed.CompareAndSwap(0, n)
		p.Buf = nil
	}
}

// full reports whether a batch should be written (or, over the hard
// limit, the connection closed) before another request is read: its
// replies so far reach flushAt, or, at their average size, a batch as long
// as window would pass maxBatchBytes.
func (o *outCount) full(window int) bool {
	b := o.bytes.Load()
	if b >= o.flushAt {
		return true
	}
	done := o.replies.Load()
	return done > 0 && b*int64(window) >= maxBatchBytes*done
}

// reset starts the count of a new batch and returns the last one's bytes.
func (o *outCount) reset() int64 {
	o.replies.Store(0)
	return o.bytes.Swap(0)
}

// newOutCount returns the count for a connection with the given hard limit.
func newOutCount(hard int64) *outCount {
	o := &outCount{hard: hard, flushAt: maxBatchBytes}
	if hard > 0 && hard < maxBatchBytes {
		o.flushAt = hard + 1
	}
	return o
}

// wait waits for every reply of the batch.
func (b *batch) wait() {
	b.wg.Wait()
	b.late.Wait()
}

// next returns the reply slot for the next request, in order.
func (b *batch) next() *resp.Reply {
	if ps := b.pushes(); ps != nil {
		// Push looks for the first reply still to come (pending).
		ps.mu.Lock()
		defer ps.mu.Unlock()
	}
	if b.n == len(b.replies) {
		s := &slot{batch: b}
		s.reply = resp.NewReplyTo(s)
		b.replies = append(b.replies, s)
	}
	s := b.replies[b.n]
	s.late, s.silent = false, false
	s.done.Store(false)
	p := s.reply
	p.Buf, p.Err = p.Buf[:0], nil
	b.n++
	b.wg.Add(1)
	b.left.Add(1)
	return p
}

// pushes is the connection's, nil until it has any (push.go).
func (b *batch) pushes() *pushes {
	if b.conn == nil {
		return nil
	}
	return b.conn.push
}

// pending is the batch's first slot whose reply is still to come, nil if
// every reply is in. The caller holds the connection's pushes.mu.
func (b *batch) pending() *slot {
	for _, s := range b.replies[:b.n] {
		if !s.done.Load() {
			return s
		}
	}
	return nil
}

// appendTo waits for every reply in the batch, appends them to out in order,
// and empties the batch.
func (b *batch) appendTo(out []byte) []byte {
	b.wait()
	if ps := b.pushes(); ps != nil {
		ps.mu.Lock()
		defer ps.mu.Unlock()
	}
	for _, s := range b.replies[:b.n] {
		p := s.reply
		if len(s.pre) > 0 {
			out = append(out, s.pre...)
			s.pre = s.pre[:0]
		}
		out = append(out, p.Buf...)
		if cap(p.Buf) > maxRetainedReply {
			p.Buf = nil
		}
	}
	b.n = 0
	return out
}
