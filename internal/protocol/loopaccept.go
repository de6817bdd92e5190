package protocol

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
)

// Accepting plaintext clients on the event loop.
//
// A client accepted by a goroutine (Go's net.Listener) reaches the loop
// through a posted hand-over (toLoop): its socket is dup'ed off Go's
// poller and registered some microseconds later, after the loop may have
// read and forwarded what another client sent after this one's first
// request (scripts/orderrace -no-first). So the loop accepts its own
// clients: the listening socket is the loop's, each connection is taken
// with one accept4 and registered in the same pass, and what it has sent
// already is read at once, before the loop serves anyone else. A client
// lives on the descriptor it was accepted with; its fd in CLIENT LIST is
// that one.
//
// TLS clients are still accepted by a goroutine: their handshake runs on
// their own goroutine (bounded by HandshakeTimeout), after which they go
// to the loop (tlsloop.go).

// acceptBatch bounds the connections accepted in one go, so that a storm
// of connects does not hold up the loop's other clients: the rest are
// accepted in the same pass, after them (a posted acceptMore).
const acceptBatch = 64

// acceptRetry is how long the loop waits before accepting again after the
// process ran out of descriptors (as Go's net package sleeps in Accept).
const acceptRetry = 5 * time.Millisecond

// loopListener is a listening socket served by the loop.
type loopListener struct {
	s    *Server
	fd   int
	reg  netloop.Reg
	more func() // acceptMore, bound once
	// stop is closed by Close (Shutdown): serve returns. err is why the
	// loop could not take the socket, set before stop is closed.
	stop     chan struct{}
	stopOnce sync.Once
	err      error
	closed   bool // on the loop: the socket is closed
}

// acceptsOnLoop reports whether the loop accepts this server's plaintext
// clients itself.
func (s *Server) acceptsOnLoop() bool {
	_, ok := s.handler.(LoopHandler)
	return s.Loop != nil && rawIOSupported && netloop.Supported && ok
}

// listenOnLoop hands ln's socket to the loop, which accepts its clients
// from then on, and reports whether it did; if not, ln is untouched and a
// goroutine accepts as usual.
func (s *Server) listenOnLoop(ln net.Listener) (*loopListener, bool) {
	fd, err := netloop.DetachListener(ln)
	if err != nil {
		return nil, false
	}
	ll := &loopListener{s: s, fd: fd, stop: make(chan struct{})}
	ll.more = ll.acceptMore
	s.mu.Lock()
	for i, l := range s.lns {
		if l == ln {
			s.lns[i] = ll // Shutdown closes the loop's socket instead
		}
	}
	shut := s.shutdown
	s.mu.Unlock()
	if shut {
		ll.Close()
	}
	s.Loop.Post(ll.register)
	return ll, true
}

// wait returns once the listener is closed: ErrServerClosed after
// Shutdown, else why the loop could not serve it.
func (ll *loopListener) wait() error {
	<-ll.stop
	if ll.err != nil {
		return ll.err
	}
	return ErrServerClosed
}

// Close stops accepting (Shutdown). The socket itself is closed on the
// loop, which may be accepting from it now.
func (ll *loopListener) Close() error {
	ll.stopOnce.Do(func() {
		close(ll.stop)
		ll.s.Loop.Post(ll.closeOnLoop)
	})
	return nil
}

// register adds the socket to the loop, on the loop.
func (ll *loopListener) register() {
	if ll.closed {
		return
	}
	select {
	case <-ll.stop:
		ll.closeOnLoop()
		return
	default:
	}
	reg, err := ll.s.Loop.Add(ll.fd, ll)
	if err != nil {
		ll.err = err
		ll.closeOnLoop()
		ll.stopOnce.Do(func() { close(ll.stop) })
		return
	}
	ll.reg = reg
	ll.acceptMore() // connections that came before it was added
}

func (ll *loopListener) closeOnLoop() {
	if ll.closed {
		return
	}
	ll.closed = true
	ll.s.Loop.Del(ll.reg)
	netloop.Close(ll.fd)
}

// Ready accepts the connections waiting, on the loop.
func (ll *loopListener) Ready(netloop.Events) { ll.acceptMore() }

// acceptMore accepts up to acceptBatch connections; edge-triggered, it
// goes on (posted) until none is left.
func (ll *loopListener) acceptMore() {
	for range acceptBatch {
		if ll.closed {
			return
		}
		fd, remote, local, err := netloop.Accept(ll.fd)
		switch {
		case err == netloop.ErrWouldBlock:
			return
		case err != nil:
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
				errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
				ll.s.acceptLog.Error(ll.s.Logger, "cannot accept a client: out of descriptors or memory; retrying", "err", err)
				time.AfterFunc(acceptRetry, func() { ll.s.Loop.Post(ll.more) })
				return
			}
			ll.s.Logger.Error("cannot accept clients any more", "err", err)
			ll.err = err
			ll.closeOnLoop()
			ll.stopOnce.Do(func() { close(ll.stop) })
			return
		}
		ll.s.acceptOnLoop(fd, remote, local)
	}
	ll.s.Loop.Post(ll.more)
}

// acceptOnLoop serves a connection the loop accepted: admitted, it is
// registered and what it has sent is served now.
func (s *Server) acceptOnLoop(fd int, remote, local string) {
	c := newConnOf(s, s.nextID.Add(1), remote, local)
	// Before admit: Kill and Shutdown, which find it there from then on,
	// reach a connection that started on the loop through the loop.
	c.onLoop = true
	switch s.admit(c) {
	case admitClosed:
		netloop.Close(fd)
		return
	case admitFull:
		netloop.Write(fd, errMaxClients)
		netloop.Close(fd)
		return
	}
	c.fd.Store(int64(fd))
	lc := newLoopClient(c, fd, s.Loop.Now())
	c.lp = lc
	lc.register()
	if !lc.stopped && c.lp == lc && !c.later && !lc.heldByFence() {
		c.serveLoop()
	}
}
