package protocol

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Handler serves requests. ServeCommand runs on the connection's goroutine;
// args are valid only until it returns (copy what you keep), and p.Done must
// be called exactly once, now or later from any goroutine.
type Handler interface {
	ServeCommand(c *Conn, args [][]byte, p *Pending)
	// BatchDone is called on the connection's goroutine once every reply of
	// a batch is in, before they are written.
	BatchDone(c *Conn)
	// ClientGone is called, from the connection's goroutine, when the client
	// disconnects while a batch marked MayBlock is still waiting: cancel
	// what waits for it. The batch's replies must still complete.
	ClientGone(c *Conn)
	// Closed is called once when a connection ends, after its last reply.
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

	handler Handler
	nextID  atomic.Int64

	mu       sync.Mutex
	ln       net.Listener
	conns    map[*Conn]struct{}
	shutdown bool
	wg       sync.WaitGroup

	lastProtoLog atomic.Int64
	lastLimitLog [closeReasons]atomic.Int64
}

// NewServer returns a Server with Redis's default limits.
func NewServer(h Handler, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{
		Limits:       DefaultLimits,
		MaxClients:   10000,
		NormalOutput: DefaultNormalOutput,
		PubSubOutput: DefaultPubSubOutput,
		Logger:       logger,
		handler:      h,
		conns:        make(map[*Conn]struct{}),
	}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("protocol: server closed")

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
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
		s.accept(nc)
	}
}

func (s *Server) accept(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
	}
	c := newConn(s, nc, s.nextID.Add(1))
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if s.MaxClients > 0 && len(s.conns) >= s.MaxClients {
		s.mu.Unlock()
		nc.Write([]byte("-ERR max number of clients reached\r\n"))
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	if s.OnConnect != nil {
		s.OnConnect(1)
	}
	go c.serve()
}

func (s *Server) release(c *Conn) {
	c.batch.wait() // replies still owed by the backend must land before reuse
	if c.outbound != nil {
		c.outbound.closeNow()
	}
	c.nc.Close()
	s.handler.Closed(c)
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

// Shutdown stops accepting, lets every connection finish the requests it has
// already read and write their replies, then closes them. It returns when all
// are closed or ctx ends (then it closes the rest at once).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	if s.ln != nil {
		s.ln.Close()
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
			c.nc.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
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
