package protocol

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
	"github.com/fenceproxy/fenceproxy/internal/ratelog"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Handler serves requests. ServeCommand runs on the connection's goroutine;
// args are valid only until it returns (copy what you keep), and p.Done must
// be called exactly once, now or later from any goroutine, with the reply's
// bytes in p.Buf or an error value in p.Err (written to the client as its
// reply: see appendErr). Done must not be called with a lock held that
// BatchDone takes: it may run BatchDone (below).
//
// The four methods are never called at the same time for one connection,
// and each happens after the calls before it, so per-connection state that
// only they touch needs no lock; what a reply's completion shares with them
// does (docs/lock-order.md).
type Handler interface {
	ServeCommand(c *Conn, args [][]byte, p *resp.Reply)
	// BatchDone is called once every reply of a batch is in, before they
	// are written: on the connection's goroutine, or, for a batch left to
	// its last reply (later.go), on the goroutine that completed that reply
	// (a backend reader, a lock worker) while the connection's goroutine
	// waits for the next request. It must not block.
	BatchDone(c *Conn)
	// ClientGone is called when the client disconnects while a batch
	// marked MayBlock is still waiting (its replies may be completing
	// meanwhile), and, for a client on the event loop, when it is killed
	// or outlasts Shutdown then (the loop closes it only once its batch is
	// written): cancel what waits for it. The batch's replies must still
	// complete. From the connection's goroutine, or, on the loop, from a
	// goroutine of its own, never at the same time as BatchDone or Closed
	// (all three under the connection's goneMu there): it must not
	// complete the batch's replies itself, only make them come.
	ClientGone(c *Conn)
	// Closed is called once when a connection ends, on its goroutine, after
	// its last reply.
	Closed(c *Conn)
}

// Server accepts client connections and serves them with a Handler.
type Server struct {
	Limits Limits
	// MaxClients bounds open connections; more are refused with Redis's error.
	MaxClients int
	// WriteTimeout bounds one write to a client; 0 means none.
	WriteTimeout time.Duration
	// NormalOutput and PubSubOutput are Redis's client-output-buffer-limit
	// for ordinary and subscribed clients (see OutputLimit).
	NormalOutput OutputLimit
	PubSubOutput OutputLimit
	// IdleTimeout closes a client idle that long (Redis's timeout); 0 means
	// never. Blocked and subscribed clients are not idle.
	IdleTimeout time.Duration
	Logger      *slog.Logger
	// OnConnect, if set, is called with +1 and -1 as connections come and go.
	OnConnect func(delta int)
	// OnLimitClose, if set, is called with a Close* reason each time the
	// server closes a client for a limit.
	OnLimitClose func(reason string)
	// HandshakeTimeout bounds a TLS client's handshake (see ServeTLS): a
	// client that never finishes it does not keep its slot for longer.
	HandshakeTimeout time.Duration
	// Loop, if set (and the Handler is a LoopHandler), serves clients from
	// that event loop while their requests allow it, instead of from a
	// goroutine each (loop.go; TLS clients once their handshake is done,
	// tlsloop.go); the loop closes its idle clients itself (loopidle.go).
	Loop *netloop.Loop

	handler Handler
	nextID  atomic.Int64
	// loopClients counts the connections the event loop holds now.
	loopClients atomic.Int64
	// detours counts the requests served on a goroutine detour
	// (goroutinedetour.go) since the start.
	detours atomic.Uint64
	// fence keeps arrival order behind a goroutine detour (goroutinedetour.go); the loop's.
	fence fence
	// loopIdle lists the clients on Loop for the idle sweep (loopidle.go);
	// touched on the loop only.
	loopIdle loopIdle

	mu       sync.Mutex
	lns      []io.Closer // the listeners (a loopListener for one the loop serves)
	conns    map[*Conn]struct{}
	shutdown bool
	wg       sync.WaitGroup

	lastProtoLog atomic.Int64
	lastLimitLog [closeReasons]atomic.Int64
	lastTLSLog   atomic.Int64
	lastErrLog   atomic.Int64
	// detailLog rate-limits the lines of resp.LoggedError replies
	// (errreply.go): a failure such as a fence store that cannot write
	// fails every request.
	detailLog ratelog.EverySecond
	// acceptLog rate-limits the loop's failed accepts (loopaccept.go).
	acceptLog ratelog.EverySecond
}

// NewServer returns a Server with Redis's default limits.
func NewServer(h Handler, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{
		Limits:           DefaultLimits,
		MaxClients:       10000,
		NormalOutput:     DefaultNormalOutput,
		PubSubOutput:     DefaultPubSubOutput,
		HandshakeTimeout: 10 * time.Second,
		Logger:           logger,
		handler:          h,
		conns:            make(map[*Conn]struct{}),
	}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("protocol: server closed")

// Serve accepts connections on ln until Shutdown. A Server may serve
// several listeners at once, each from its own Serve or ServeTLS.
func (s *Server) Serve(ln net.Listener) error { return s.serve(ln, nil) }

// ServeTLS is Serve for clients that speak TLS with cfg. The handshake runs
// on the connection's own goroutine, bounded by HandshakeTimeout, so a slow
// or silent client never holds up the accept loop.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error { return s.serve(ln, cfg) }

func (s *Server) serve(ln net.Listener, cfg *tls.Config) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	if cfg == nil && s.acceptsOnLoop() {
		if ll, ok := s.listenOnLoop(ln); ok {
			return ll.wait()
		}
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.shutdown
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		s.accept(nc, cfg)
	}
}

func (s *Server) accept(raw net.Conn, cfg *tls.Config) {
	if tc, ok := raw.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
	}
	nc := raw
	var tio *tlsTransport
	if cfg != nil {
		nc, tio = newTLSConn(raw, cfg) // the handshake waits for the first read
	}
	c := newConn(s, nc, s.nextID.Add(1))
	c.raw, c.tio = raw, tio
	_, loopHandler := s.handler.(LoopHandler)
	toLoop := s.Loop != nil && rawIOSupported && loopHandler
	// A TLS client goes to the loop after its handshake (serve): set
	// before Kill and Shutdown can see the connection, which they then
	// reach through the loop.
	c.onLoop = toLoop && tio != nil
	switch s.admit(c) {
	case admitClosed:
		nc.Close()
		return
	case admitFull:
		// Over TLS the error could only be written after a handshake, which
		// must not run on the accept loop: the client is just dropped, as
		// Redis drops it.
		if cfg == nil {
			nc.Write(errMaxClients)
		}
		raw.Close()
		return
	}
	if toLoop && tio == nil && c.startOnLoop() {
		return
	}
	go c.serve()
}

// errMaxClients is Redis's refusal of a client past maxclients.
var errMaxClients = []byte("-ERR max number of clients reached\r\n")

// What admit decided.
const (
	admitted    = iota
	admitClosed // the server is shutting down
	admitFull   // MaxClients are connected already
)

// admit counts a new connection in, or says why not (the caller then
// closes it).
func (s *Server) admit(c *Conn) int {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return admitClosed
	}
	if s.MaxClients > 0 && len(s.conns) >= s.MaxClients {
		s.mu.Unlock()
		return admitFull
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	if s.OnConnect != nil {
		s.OnConnect(1)
	}
	return admitted
}

func (s *Server) release(c *Conn) {
	c.batch.wait() // replies still owed by the backend must land before reuse
	if c.outbound != nil {
		c.outbound.closeNow()
	}
	if c.outbox != nil {
		c.outbox.close() // the relay's next write fails
	}
	if c.nc != nil { // nil for a connection closed on the event loop
		c.nc.Close()
	}
	c.goneMu.Lock() // after a ClientGone the loop started (clientGone)
	s.handler.Closed(c)
	c.goneMu.Unlock()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if s.OnConnect != nil {
		s.OnConnect(-1)
	}
	s.wg.Done()
}

// Each calls fn for every open connection, in no order. fn must only read
// the connection's immutable fields and its Name.
func (s *Server) Each(fn func(c *Conn)) {
	s.mu.Lock()
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		fn(c)
	}
}

// Clients returns the number of open connections.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// LoopClients is how many clients the event loop (Loop) serves now: the
// rest are on goroutines of their own (INFO's loop_clients, for an operator
// to see which clients the loop's cheaper path serves).
func (s *Server) LoopClients() int { return int(s.loopClients.Load()) }

// GoroutineDetours is how many requests of clients on the loop were served
// on a goroutine detour since the start: what the loop's thread does not
// serve (LoopHandler.ServesOnLoop false). INFO's goroutine_detours, for an
// operator to see how much of the traffic leaves the loop.
func (s *Server) GoroutineDetours() uint64 { return s.detours.Load() }

// Shutdown stops accepting, lets every connection finish the requests it has
// already read and write their replies, then closes them. It returns when all
// are closed or ctx ends (then it closes the rest at once).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.interrupt()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			if c.onLoop {
				c.interruptOnLoop(true)
				continue
			}
			// The raw connection: closing a TLS one would first try to
			// send close_notify to a client that may not be reading.
			c.raw.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// logHandshakeError logs at most one failed TLS handshake a second.
func (s *Server) logHandshakeError(c *Conn, err error) {
	now := time.Now().Unix()
	if last := s.lastTLSLog.Load(); last != now && s.lastTLSLog.CompareAndSwap(last, now) {
		s.Logger.Warn("closing client after failed TLS handshake", "client", c.RemoteAddr, "err", err)
	}
}

// logProtocolError logs at most one protocol error a second: a client
// spraying garbage must not flood the log.
func (s *Server) logProtocolError(c *Conn, err error) {
	now := time.Now().Unix()
	if last := s.lastProtoLog.Load(); last != now && s.lastProtoLog.CompareAndSwap(last, now) {
		s.Logger.Warn("closing client after protocol error", "client", c.RemoteAddr, "err", err)
	}
}

// Reasons the server closes a client, indexing closeReasonNames.
const (
	closeOutputNormal = iota
	closeOutputPubSub
	closeQuery
	closeIdle
	closeReasons
)

var closeReasonNames = [closeReasons]string{CloseOutputNormal, CloseOutputPubSub, CloseQueryBuffer, CloseIdle}

// limitClosed reports that c is being closed for a limit: counted every
// time, logged at most once a second per reason (a flood of clients over a
// limit must not flood the log). Idle clients are logged at debug level, as
// Redis logs them at verbose: closing them is routine.
func (s *Server) limitClosed(c *Conn, reason int, msg string, attrs ...any) {
	if s.OnLimitClose != nil {
		s.OnLimitClose(closeReasonNames[reason])
	}
	level := slog.LevelWarn
	if reason == closeIdle {
		level = slog.LevelDebug
	}
	now := time.Now().Unix()
	last := &s.lastLimitLog[reason]
	if l := last.Load(); l != now && last.CompareAndSwap(l, now) {
		attrs = append([]any{"client", c.RemoteAddr, "id", c.ID, "name", c.Name()}, attrs...)
		s.Logger.Log(context.Background(), level, msg, attrs...)
	}
}
