//go:build linux

package netloop

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Supported reports whether loops can run here (Linux: epoll).
const Supported = true

// Events say what became of a socket (edge-triggered, see invariant 3).
type Events uint32

const (
	// In: bytes to read, or the end of the stream.
	In Events = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR
	// Out: room to write again after a write that did not take everything
	// (ErrWouldBlock): the edge a writer with bytes left waits for
	// (invariant 3). It may also come along with In.
	Out Events = unix.EPOLLOUT | unix.EPOLLHUP | unix.EPOLLERR
	// Ended: the peer ended its stream, or the socket broke. It comes in
	// the same edge as In, once: a reader that sees it must read on to
	// the end (a short read no longer means "nothing more until the next
	// edge", as no edge follows).
	Ended Events = unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR
)

// A Handler serves one socket of the loop.
type Handler interface {
	// Ready is called on the loop's goroutine when the socket changed (ev
	// has In, Out or both set).
	Ready(ev Events)
}

// A Flusher has output deferred to the end of the loop's pass (Schedule).
type Flusher interface {
	// Flush is called on the loop's goroutine, once per Schedule made
	// before the pass ended.
	Flush()
}

// ErrClosed is returned by Add once the loop is closed.
var ErrClosed = errors.New("netloop: loop closed")

// Loop is one event loop. See the package doc.
type Loop struct {
	epfd int
	evfd int // eventfd: wakes the loop out of epoll_wait (invariant 4)

	mu      sync.Mutex
	posted  []func()
	flushes []Flusher
	closed  bool

	// sleeping is true while the loop waits (or is about to wait) in
	// epoll_wait with nothing to do: whoever gives it work then wakes it.
	sleeping atomic.Bool
	wakeups  atomic.Uint64 // see Wakeups
	done     chan struct{}

	// Owned by the loop's goroutine.
	handlers []registered
	free     []uint32
	runPost  []func()
	runFlush []Flusher
	passTime time.Time // when the pass under way began (Now); zero until asked
}

type registered struct {
	h   Handler
	fd  int
	gen uint32
}

// Reg is a socket's registration with its loop, for Del.
type Reg struct {
	id  uint32
	gen uint32
}

// wakeID is the epoll data of the eventfd: no handler has it.
const wakeID = ^uint32(0)

// yieldEvery is how often the loop yields to the scheduler (see run).
const yieldEvery = 5 * time.Millisecond

// eventfdOne is what wake writes to the eventfd (only read: shared by
// every waker; a buffer per call would escape to the heap).
var eventfdOne = [8]byte{1}

// New starts a loop on a goroutine of its own.
func New() (*Loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1} // wakeID
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, err
	}
	l := &Loop{epfd: epfd, evfd: evfd, done: make(chan struct{})}
	go l.run()
	return l, nil
}

// Add registers fd, served by h, and returns its registration. Call it on
// the loop's goroutine only (invariant 2). If fd is ready already, h's
// Ready is called in the pass that follows.
func (l *Loop) Add(fd int, h Handler) (Reg, error) {
	var id uint32
	if n := len(l.free); n > 0 {
		id, l.free = l.free[n-1], l.free[:n-1]
	} else {
		id = uint32(len(l.handlers))
		l.handlers = append(l.handlers, registered{})
	}
	r := &l.handlers[id]
	r.gen++
	r.h, r.fd = h, fd
	ev := unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET,
		Fd:     int32(id), Pad: int32(r.gen),
	}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		r.h = nil
		l.free = append(l.free, id)
		return Reg{}, err
	}
	return Reg{id: id, gen: r.gen}, nil
}

// Del stops serving the socket of reg: its handler is not called again,
// even for events already collected in the pass under way. The caller
// still owns the descriptor (closes it, or hands it on). Call it on the
// loop's goroutine only.
func (l *Loop) Del(reg Reg) {
	if int(reg.id) >= len(l.handlers) {
		return
	}
	r := &l.handlers[reg.id]
	if r.h == nil || r.gen != reg.gen {
		return
	}
	unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, r.fd, nil)
	r.h, r.fd = nil, -1
	r.gen++ // events of this pass for the old registration are dropped
	l.free = append(l.free, reg.id)
}

// Now is the time the loop's pass under way began (its wait in epoll
// ended), read from the clock once per pass, when first asked: for the
// time bytes were received, earlier than the read itself by at most the
// pass so far. Call it on the loop's goroutine only.
func (l *Loop) Now() time.Time {
	if l.passTime.IsZero() {
		l.passTime = time.Now()
	}
	return l.passTime
}

// Post runs fn on the loop's goroutine, soon: in the pass under way if the
// loop is busy, else it is woken. Posted functions run in the order
// posted. fn must not block. A function posted to a closed loop is dropped.
func (l *Loop) Post(fn func()) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.posted = append(l.posted, fn)
	l.mu.Unlock()
	l.wake()
}

// Schedule has f flushed at the end of the loop's pass: a Flusher
// scheduled many times during one pass (a backend connection that many
// clients' requests were queued on) is flushed once per Schedule, so
// callers schedule only when they have nothing scheduled yet.
func (l *Loop) Schedule(f Flusher) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.flushes = append(l.flushes, f)
	l.mu.Unlock()
	l.wake()
}

// wake wakes the loop if it waits in epoll_wait (invariant 4).
func (l *Loop) wake() {
	if l.sleeping.Load() && l.sleeping.CompareAndSwap(true, false) {
		l.wakeups.Add(1)
		Write(l.evfd, eventfdOne[:])
	}
}

// Wakeups is how many times work given to the loop from another goroutine
// woke it out of epoll_wait (a system call each, on both sides): what a
// loop serving its clients well keeps low.
func (l *Loop) Wakeups() uint64 { return l.wakeups.Load() }

// Close stops the loop once its pass under way ends. The sockets still
// registered are not closed: their owners close them.
func (l *Loop) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	l.sleeping.Store(true)
	l.wake()
	<-l.done
}

func (l *Loop) run() {
	defer func() {
		unix.Close(l.epfd)
		unix.Close(l.evfd)
		close(l.done)
	}()
	events := make([]unix.EpollEvent, 256)
	var drain [8]byte
	timeout := 0
	lastYield := time.Now()
	for {
		n, err := unix.EpollWait(l.epfd, events, timeout)
		l.sleeping.Store(false)
		l.passTime = time.Time{}
		if err != nil && err != unix.EINTR {
			panic("netloop: epoll_wait: " + err.Error())
		}
		for i := range max(n, 0) {
			ev := &events[i]
			id := uint32(ev.Fd)
			if id == wakeID {
				Read(l.evfd, drain[:])
				continue
			}
			if int(id) >= len(l.handlers) {
				continue
			}
			r := &l.handlers[id]
			if r.h == nil || r.gen != uint32(ev.Pad) {
				continue
			}
			r.h.Ready(Events(ev.Events))
		}
		if l.runPending() {
			return
		}
		if now := time.Now(); now.Sub(lastYield) > yieldEvery {
			// A goroutine that is never rescheduled looks to the
			// runtime like one running too long: every 10 ms sysmon
			// forced a preemption (a signal, or taking the loop's P
			// while it waited in epoll_wait) and then polled every 20
			// us for a millisecond: 284 preemption signals and 10,350
			// sysmon sleeps in 300,000 requests at -c 50 -P 1; with a
			// yield every 2 ms, 6 and 894 (and 3,910 futex calls
			// against 997: a yield can wake an idle thread, hence 5 ms,
			// under the 10 ms). Yielding every pass was worse: the loop
			// then hopped between threads, waking them.
			lastYield = now
			runtime.Gosched()
		}
		// Nothing left to do: wait for the sockets, or for whoever gives
		// the loop work next (invariant 4). sleeping is set before the
		// last look at the queues, so that work queued after that look
		// sees it set and wakes the loop.
		l.sleeping.Store(true)
		l.mu.Lock()
		busy := len(l.posted) > 0 || len(l.flushes) > 0 || l.closed
		l.mu.Unlock()
		timeout = -1
		if busy {
			l.sleeping.Store(false)
			timeout = 0
		}
	}
}

// runPending runs what was posted and scheduled, until nothing is left,
// and reports whether the loop is closed.
func (l *Loop) runPending() (closed bool) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return true
		}
		posts, flushes := l.posted, l.flushes
		l.posted, l.flushes = l.runPost[:0], l.runFlush[:0]
		l.mu.Unlock()
		if len(posts) == 0 && len(flushes) == 0 {
			l.runPost, l.runFlush = posts, flushes
			return false
		}
		for i, fn := range posts {
			fn()
			posts[i] = nil
		}
		for i, f := range flushes {
			f.Flush()
			flushes[i] = nil
		}
		l.runPost, l.runFlush = posts[:0], flushes[:0]
	}
}
