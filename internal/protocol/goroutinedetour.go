package protocol

import (
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// A goroutine detour: a request the loop's thread must not serve.
//
// The Handler says which requests it serves without blocking
// (LoopHandler.ServesOnLoop). Any other request of a client on the loop is
// served on a goroutine instead, while the client stays on the loop: the
// loop freezes the connection (it reads and dispatches nothing more of
// the client's, as during a detour: detour.go), a goroutine runs the
// Handler's ServeCommand for the request as the goroutine transport would
// (AfterReplies and OffLoop wait there; OnLoop reports false),
// and posts the rest back to the loop, which goes on with the connection
// where it stopped (afterDispatch, then the next buffered request). The
// socket never moves: the client keeps its descriptor and its place in
// the loop's count, and its replies, stream and pushes are the loop's to
// write, as always. The batch stays open meanwhile, and its earlier
// replies complete into their slots (the loop's hold, batch.left's 1, keeps
// them from writing it).
//
// Arrival order: the goroutine starts some microseconds after the loop
// hands it the request, on another thread, while the loop goes on. So that
// what other clients send after a request that goes first in its batch
// does not reach the Handler (and Redis) before it, the loop raises a
// fence for it (fence): other clients that become ready meanwhile are
// noted, not served, until the goroutine has dispatched the request, or
// for at most fenceWait (a dial may take longer). The loop's thread never
// waits for it: it goes on reading Redis's replies, writing batches and
// serving the fenced client's own events.

// fenceWait bounds how long other clients' new requests wait behind a
// goroutine detour's dispatch (fence): a connection from a pool is taken
// and written to in microseconds; one that must be dialled first may take
// longer, and the others then go on rather than wait for it. A variable
// for tests only, which must not depend on how soon a loaded machine
// starts a goroutine.
var fenceWait = 5 * time.Millisecond

// fence is a loop's arrival-order fence (see above). On the loop only.
type fence struct {
	owner *loopClient   // the client whose detour holds it; nil: none
	gen   uint64        // which raise a timer belongs to
	held  []*loopClient // the clients noted while it stood, in order
}

// startGoroutineDetour hands args, which the Handler does not serve on the
// loop's thread, to a goroutine (goroutineDetour), on the loop, while the
// loop holds the connection; the connection is frozen until endGoroutineDetour.
func (c *Conn) startGoroutineDetour(args [][]byte) {
	lc := c.lp
	c.server.detours.Add(1)
	first := c.batch.n == 0
	p := c.batch.next()
	if first {
		c.heldInput = 0
		lc.raiseFence()
	}
	c.detour.away = true
	if c.rd.Buffered() == 0 && !lc.edge.MayRead() && (lc.tls == nil || lc.tlsDry) {
		// Nothing more of the client's is here: the batch ends with this
		// request, and its goroutine lets go of it (goroutineDetour), so
		// that the reply is written where it completes, as a batch the
		// loop ended is, rather than once the loop has run
		// endGoroutineDetour: a lock grant is checked against its lease
		// when it completes, and nothing may hold its reply after that
		// (a loaded loop did, and the fault suite counted a Redisson
		// grant replied after its lease was over). resume goes on.
		c.detour.ends = true
		c.later = true
		lc.held.Store(heldWanted)
	}
	go c.goroutineDetour(args, p)
}

// goroutineDetour serves args on its goroutine, then gives the connection
// back to the loop: endGoroutineDetour, posted before the batch's write
// can post resume, so that the loop runs them in that order.
func (c *Conn) goroutineDetour(args [][]byte, p *resp.Reply) {
	c.dispatch(args, p)
	ends := c.detour.ends
	c.lp.loop.Post(func() { c.endGoroutineDetour(args) })
	if ends && c.batch.left.Add(-1) == 0 {
		c.finishLater() // every reply is in: written here
	}
}

// endGoroutineDetour goes on, on the loop, with a connection whose request
// was served on a goroutine: the request's own checks (afterDispatch:
// MayBlock, CloseAfterReply, a full batch; a hang-up, CLIENT KILL or
// Shutdown noted meanwhile), then what the client sent after it.
func (c *Conn) endGoroutineDetour(args [][]byte) {
	lc := c.lp
	c.detour.away = false
	ends := c.detour.ends
	c.detour.ends = false
	lc.lowerFence()
	if c.writesTaken {
		lc.untrackIdle() // a subscribed client is never idle, as in Redis
	}
	if lc.stopped {
		return
	}
	if ends {
		// The batch ended with the request (its goroutine let go of it):
		// resume, posted once it is written, goes on; what afterDispatch
		// would do with it is done here.
		if c.closeAfterReply {
			lc.eof = true // the Handler panicked: closed once written
		}
		if c.mayBlock && (lc.hungUp || lc.closeNow) {
			lc.clientGone() // it hung up with the request, or in the detour
		}
		return
	}
	if c.afterDispatch(args) {
		c.serveLoop()
	}
}

// onGoroutine reports whether the Handler's call runs on a goroutine
// (the goroutine transport's, or a goroutine detour's), where it may wait.
func (c *Conn) onGoroutine() bool { return c.lp == nil || c.detour.away }

// raiseFence holds other clients' new requests until lc's detour has
// dispatched its request, or fenceWait has passed. On the loop.
func (lc *loopClient) raiseFence() {
	f := lc.fenceOf()
	f.lower() // one at a time: an older one gives way
	f.owner = lc
	f.gen++
	time.AfterFunc(fenceWait, f.timerFor(lc.loop, f.gen))
}

// fenceOf is lc's loop's fence.
func (lc *loopClient) fenceOf() *fence { return &lc.c.server.fence }

// timerFor is the fence's timer for raise gen: it lowers the fence on the
// loop if it still stands for that raise.
func (f *fence) timerFor(post interface{ Post(func()) }, gen uint64) func() {
	return func() {
		post.Post(func() {
			if f.gen == gen {
				f.lower()
			}
		})
	}
}

// lowerFence lowers the fence if lc's detour holds it. On the loop.
func (lc *loopClient) lowerFence() {
	if f := lc.fenceOf(); f.owner == lc {
		f.lower()
	}
}

// lower lets the clients it held be served, in the order they came.
func (f *fence) lower() {
	if f.owner == nil {
		return
	}
	f.owner = nil
	held := f.held
	f.held = nil
	for _, lc := range held {
		lc.fenced = false
		lc.Ready(0)
	}
}

// fenced reports whether lc must wait behind another client's goroutine
// detour before its requests are served, and notes it if so. On the loop.
func (lc *loopClient) heldByFence() bool {
	f := lc.fenceOf()
	if f.owner == nil || f.owner == lc {
		return false
	}
	if !lc.fenced {
		lc.fenced = true
		f.held = append(f.held, lc)
	}
	return true
}
