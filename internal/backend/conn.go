package backend

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Loop is an event loop that serves connections (Options.Loop): package
// netloop's, named here so that a caller that only hands it on needs no
// import of netloop.
type Loop = netloop.Loop

// Options say how to reach a Redis node.
type Options struct {
	Addr        string
	Username    string // with Password: AUTH username password
	Password    string // empty: no AUTH
	DialTimeout time.Duration
	Logger      *slog.Logger
	// ObserveReply, if set, is called with each request's round-trip time.
	ObserveReply func(time.Duration)
	// ReplyTimeout, if set, bounds how long a reply may take: past it the
	// connection is taken as dead (a stopped or hung Redis) and every request
	// on it fails with ErrLost. For connections that carry only
	// requests of bounded duration (the proxy's lock scripts and WAITs).
	// A SyncConn bounds a whole batch by it, give or take a quarter
	// (SyncConn.armDeadline).
	ReplyTimeout time.Duration
	// RESP3 makes the connection speak RESP3 (HELLO 3), for clients that
	// asked for it: Redis then writes their replies in RESP3 itself.
	RESP3 bool
	// ReadBuffer sizes the reply reader; 0 means 64 KB, for connections
	// shared by many clients. Replies longer than it still pass.
	ReadBuffer int
	// NoReconnect leaves the connection down once it breaks: for a
	// connection pinned to one client, whose state (MULTI, WATCH) a fresh
	// connection would not have.
	NoReconnect bool
	// TLS, if set, wraps every connection in TLS with this configuration
	// (see ForAddr for the name the certificate is checked against).
	TLS *tls.Config
	// Admit, if set, is asked before every connection (the first and each
	// reconnection) goes into service, with the role that Redis reports on
	// it (ROLE's first element: "master", "slave", "sentinel"). If it
	// returns an error, the connection is dropped and the dial fails (a
	// Conn keeps trying to reconnect). The server behind an address can
	// change while the proxy is away (a master restarted empty, or demoted):
	// this is where that is caught before anything is sent.
	Admit func(role string) error
	// OnBreak, if set, is called after an established connection breaks
	// (not after Close).
	OnBreak func()
	// Gate, if set, is shared by every connection to the node: while it is
	// closed, requests get its refusal and are not sent.
	Gate *Gate
	// OnPush, if set, gets every RESP3 push message (a '>' reply no
	// request asked for: client-side caching's invalidations) read on the
	// connection, on the reader's goroutine (or the Loop's: then it must
	// not wait), in the order Redis sent it among the replies (each reply's
	// p.Done runs before the pushes after it). Only for a connection of one
	// client's own, where the only pushes are that client's.
	OnPush func(frame []byte)
	// DB, if not 0, is the database the connection SELECTs after it
	// authenticates (each reconnection too): for the connections that carry
	// the requests of clients that selected it.
	DB int
	// AsUser and AsPassword, if AsUser is set, authenticate the connection
	// again, last (after the SELECT and ROLE, which it may not be allowed):
	// a client's connection of its own, run as the Redis user the client
	// authenticated as. Redis's refusal is the dial's error.
	AsUser, AsPassword string
	// Loop, if set, serves the connection from that event loop instead of a
	// writer and a reader goroutine of its own (loop.go): requests queued
	// during one pass of the loop leave in one write at its end, and
	// replies are read and completed on the loop, and OnPush called there
	// (it must not wait). Not for a connection with TLS or ReplyTimeout
	// (those get goroutines). With
	// NoReconnect (a client's connection of its own: MULTI, WATCH, a
	// blocking command), its requests then leave at the end of the pass
	// that queued them, as the shared connections' do.
	Loop *netloop.Loop
}

// inflight is a request written (or about to be) and awaiting its reply.
type inflight struct {
	p     *resp.Reply
	start time.Time
}

// Conn is one pipelined connection to Redis, shared by many clients and
// re-established in the background after it breaks.
//
// Lock order: Conn.mu only; no callback runs under it.
type Conn struct {
	opts Options

	mu     sync.Mutex
	nc     net.Conn // nil while disconnected
	wbuf   []byte   // requests not yet written
	queue  []inflight
	head   int // queue[head:] await replies, in write order
	closed bool

	wake chan struct{} // the writer has work
	done chan struct{} // closed by Close

	// wmu is held from taking wbuf to writing it, by the writer and by
	// DoNow, so that what they write leaves in queue order. Lock order:
	// wmu, then mu.
	wmu   sync.Mutex
	spare []byte // the buffer wbuf swaps with, under wmu
	// loop serves the connection instead of the writer and reader
	// goroutines (loop.go); nc is then a *loopSock.
	loop *netloop.Loop
	// synchronous: the connection is a SyncConn's, whose user writes and
	// reads it (exchange.go); it has no writer or reader goroutine.
	synchronous bool
}

// Dial connects to Redis and starts the connection's goroutines.
func Dial(opts Options) (*Conn, error) {
	c := newConn(opts)
	if opts.Loop != nil && opts.TLS == nil && opts.ReplyTimeout == 0 {
		c.loop = opts.Loop
	}
	nc, err := c.connect()
	if err != nil {
		return nil, err
	}
	if c.loop != nil {
		if err := c.attach(nc); err != nil {
			return nil, err
		}
		return c, nil
	}
	c.nc = nc
	go c.writeLoop()
	go c.readLoop(nc)
	return c, nil
}

// DialRaw dials and authenticates one connection (HELLO 3 if opts.RESP3)
// and hands it over as it is: for a client that gets a stream from Redis
// rather than one reply per request (pub/sub).
func DialRaw(opts Options) (net.Conn, error) {
	return newConn(opts).connect()
}

// newConn is a Conn of opts, not connected yet, with their defaults filled in.
func newConn(opts Options) *Conn {
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Conn{opts: opts, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// connect dials and authenticates one TCP connection.
func (c *Conn) connect() (net.Conn, error) {
	nc, err := net.DialTimeout("tcp", c.opts.Addr, c.opts.DialTimeout)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
	}
	if c.opts.TLS != nil {
		if nc, err = tlsHandshake(nc, c.opts.TLS, c.opts.Addr, c.opts.DialTimeout); err != nil {
			return nil, err
		}
	}
	if err := c.handshake(nc); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.selectDB(nc); err != nil {
		nc.Close()
		return nil, err
	}
	if c.opts.Admit != nil {
		role, err := c.role(nc)
		if err == nil {
			err = c.opts.Admit(role)
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
	}
	if c.opts.AsUser != "" {
		if err := c.authAs(nc); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return nc, nil
}

// authAs authenticates nc as AsUser, before it carries anything else.
func (c *Conn) authAs(nc net.Conn) error {
	return c.expectOK(nc, "AUTH", c.opts.AsUser, c.opts.AsPassword)
}

// expectOK sends one command on a fresh nc and wants +OK back; Redis's
// own refusal comes back as the error, a resp.Error, so a caller can give
// it to the client as Redis's answer.
func (c *Conn) expectOK(nc net.Conn, args ...string) error {
	req := make([][]byte, len(args))
	for i, a := range args {
		req[i] = []byte(a)
	}
	reply, err := c.exchange(nc, resp.AppendCommand(nil, req), 512)
	if err != nil {
		return err
	}
	if re, ok := resp.ErrorReply(reply); ok {
		return re
	}
	if string(reply) != "+OK\r\n" {
		return fmt.Errorf("%s answered %q", args[0], trimCRLF(reply))
	}
	return nil
}

// exchange writes req on nc before it carries anything else and reads its
// one reply, within DialTimeout. Only this reply is outstanding, so a
// reader of size bufSize takes nothing beyond it.
func (c *Conn) exchange(nc net.Conn, req []byte, bufSize int) ([]byte, error) {
	nc.SetDeadline(time.Now().Add(c.opts.DialTimeout))
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(req); err != nil {
		return nil, err
	}
	return resp.AppendReply(nil, bufio.NewReaderSize(nc, bufSize))
}

// readReply appends the next reply on rd to p.Buf. A reply over the
// size limit is read to its end and fails this request alone
// (ErrReplyTooLarge in p.Err): the stream stays in step and the connection
// serves the others. Any other error leaves p.Buf as it was and breaks the
// connection.
func readReply(p *resp.Reply, rd *bufio.Reader) error {
	start := len(p.Buf)
	var err error
	p.Buf, err = resp.AppendReply(p.Buf, rd)
	switch {
	case errors.Is(err, resp.ErrTooLarge):
		p.Err = ErrReplyTooLarge
	case err != nil:
		p.Buf = p.Buf[:start]
		return err
	}
	return nil
}

var roleRequest = []byte("*1\r\n$4\r\nROLE\r\n")

// role asks the server on nc for its role, before the connection carries
// anything else.
func (c *Conn) role(nc net.Conn) (string, error) {
	reply, err := c.exchange(nc, roleRequest, 4096)
	if err != nil {
		return "", err
	}
	v, err := resp.Parse(reply)
	if err != nil {
		return "", fmt.Errorf("ROLE: %w", err)
	}
	if fields, ok := v.([]any); ok && len(fields) > 0 {
		if role, ok := fields[0].(string); ok {
			return role, nil
		}
	}
	return "", fmt.Errorf("ROLE answered %q", trimCRLF(reply))
}

// handshake authenticates and, for RESP3, switches the protocol: HELLO 3
// (with AUTH inside when there is a password), or a plain AUTH.
func (c *Conn) handshake(nc net.Conn) error {
	var args [][]byte
	switch {
	case c.opts.RESP3:
		args = [][]byte{[]byte("HELLO"), []byte("3")}
		if c.opts.Password != "" {
			user := c.opts.Username
			if user == "" {
				user = "default"
			}
			args = append(args, []byte("AUTH"), []byte(user), []byte(c.opts.Password))
		}
	case c.opts.Password != "" && c.opts.Username != "":
		args = [][]byte{[]byte("AUTH"), []byte(c.opts.Username), []byte(c.opts.Password)}
	case c.opts.Password != "":
		args = [][]byte{[]byte("AUTH"), []byte(c.opts.Password)}
	default:
		return nil
	}
	reply, err := c.exchange(nc, resp.AppendCommand(nil, args), 4096)
	if err != nil {
		return err
	}
	if re, ok := resp.ErrorReply(reply); ok {
		return re
	}
	if len(reply) == 0 || (!c.opts.RESP3 && string(reply) != "+OK\r\n") {
		return fmt.Errorf("%s answered %q", args[0], trimCRLF(reply))
	}
	return nil
}

// Do sends one request; its reply lands in p (or its failure in p.Err:
// ErrUnavailable, ErrLost, the Gate's refusal), and p.Done is called.
func (c *Conn) Do(args [][]byte, p *resp.Reply) {
	c.enqueue(args, nil, false, p)
}

// DoEncoded sends a request already in RESP form (AppendCommand's output),
// preceded by ASKING if asking, as Redis Cluster wants after an -ASK
// redirect; only the request's own reply lands in p.
func (c *Conn) DoEncoded(req []byte, asking bool, p *resp.Reply) {
	c.enqueue(nil, req, asking, p)
}

var askingRequest = []byte("*1\r\n$6\r\nASKING\r\n")

func (c *Conn) enqueue(args [][]byte, req []byte, asking bool, p *resp.Reply) {
	if err := c.opts.Gate.Refusal(); err != nil {
		p.Err = err
		p.Done()
		return
	}
	c.mu.Lock()
	if c.nc == nil {
		c.mu.Unlock()
		p.Err = ErrUnavailable
		p.Done()
		return
	}
	if c.opts.ReplyTimeout > 0 && c.head == len(c.queue) {
		// The reader may be blocked with no deadline: give it one.
		c.nc.SetReadDeadline(time.Now().Add(c.opts.ReplyTimeout))
	}
	var now time.Time // only for ObserveReply: a clock read per request shows at -P 16
	if c.opts.ObserveReply != nil {
		now = time.Now()
	}
	if asking {
		c.wbuf = append(c.wbuf, askingRequest...)
		c.queue = append(c.queue, inflight{resp.NewReplyFunc(func() {}), now})
	}
	if req != nil {
		c.wbuf = append(c.wbuf, req...)
	} else {
		c.wbuf = resp.AppendCommand(c.wbuf, args)
	}
	c.queue = append(c.queue, inflight{p, now})
	if c.loop != nil {
		// The loop writes at the end of its pass whatever was queued
		// during it: scheduled once, however many requests join.
		sock := c.nc.(*loopSock)
		first := !sock.scheduled
		sock.scheduled = true
		c.mu.Unlock()
		if first {
			c.loop.Schedule(sock)
		}
		return
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// DoWithin sends one request and waits up to wait for its reply, for the
// proxy's own requests on a client's connection (a tracking connection's
// CLIENT TRACKING, HELLO). Past wait the connection is closed, since its
// reply would never be read now, and ErrLost is returned.
func (c *Conn) DoWithin(args [][]byte, wait time.Duration) ([]byte, error) {
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	c.Do(args, p)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		c.Close()
		return nil, ErrLost
	}
	if p.Err != nil {
		return nil, p.Err
	}
	if len(p.Buf) == 0 {
		return nil, ErrLost
	}
	return p.Buf, nil
}

// DoNow is Do, and writes the request (with whatever is queued before it)
// on the caller's goroutine before it returns, rather than leave it to the
// writer: for the last request of a batch on a connection of one client's
// own, where there is nothing from others to wait for. A blocking command,
// or the EXEC of a watched transaction, then leaves for Redis as soon as
// it is read, a goroutine hop ahead of what another client sends next on a
// shared connection, as it would reach Redis without the proxy.
func (c *Conn) DoNow(args [][]byte, p *resp.Reply) {
	if c.loop != nil {
		// The loop writes it at the end of this pass (or, from a
		// goroutine, of the pass it wakes for); it alone writes to the
		// socket.
		c.Do(args, p)
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.Do(args, p)
	c.write()
}

// writeLoop sends whatever has accumulated since its last write, so that a
// burst of requests from many clients leaves in one system call.
func (c *Conn) writeLoop() {
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		// The wake-up made this goroutine the next to run, ahead of the
		// client goroutines that the same network poll made ready. Yield
		// once so they append their requests first and one write carries
		// them all.
		runtime.Gosched()
		c.wmu.Lock()
		c.write()
		c.wmu.Unlock()
	}
}

// write sends what is queued; the caller holds wmu.
func (c *Conn) write() {
	c.mu.Lock()
	buf, nc := c.wbuf, c.nc
	c.wbuf = c.spare[:0]
	c.mu.Unlock()
	if len(buf) == 0 || nc == nil {
		c.spare = buf
		return
	}
	if _, err := nc.Write(buf); err != nil {
		c.fail(nc, err)
	}
	if cap(buf) > 1<<20 {
		buf = nil
	}
	c.spare = buf
}

// readLoop copies each reply into the request at the head of the queue. It
// alone completes queued requests, so a reply being read is never answered
// twice; when the connection breaks it fails the rest with ErrLost and
// starts reconnecting.
func (c *Conn) readLoop(nc net.Conn) {
	size := c.readBufferSize()
	rd := bufio.NewReaderSize(nc, size)
	err := c.readReplies(nc, rd)
	c.fail(nc, err)
	c.broken(err)
}

// broken ends a connection that broke (or was closed): the requests on it
// fail with ErrLost, and, unless it was closed, it reconnects in the
// background. nc is already out of service (fail).
func (c *Conn) broken(err error) {
	c.mu.Lock()
	lost := append([]inflight(nil), c.queue[c.head:]...)
	clear(c.queue)
	c.queue, c.head = c.queue[:0], 0
	c.mu.Unlock()
	for _, f := range lost {
		f.p.Err = ErrLost
		f.p.Done()
	}
	c.afterBreak(err, len(lost))
}

// afterBreak tells OnBreak and reconnects, unless the connection was
// closed, once a broken connection's requests (failed of them) have their
// ErrLost.
func (c *Conn) afterBreak(err error, failed int) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return
	}
	if c.opts.OnBreak != nil {
		c.opts.OnBreak()
	}
	if c.opts.NoReconnect {
		return
	}
	c.opts.Logger.Warn("lost backend connection; reconnecting", "addr", c.opts.Addr, "err", err, "requests_failed", failed)
	if c.loop != nil || c.synchronous {
		go c.reconnect() // neither the loop nor a SyncConn's user waits for a dial
	} else {
		c.reconnect() // on the reader's goroutine, which has nothing else to do
	}
}

func (c *Conn) readBufferSize() int {
	if c.opts.ReadBuffer <= 0 {
		return 64 << 10
	}
	return c.opts.ReadBuffer
}

func (c *Conn) readReplies(nc net.Conn, rd *bufio.Reader) error {
	for {
		if b, err := rd.Peek(1); err != nil {
			return err
		} else if b[0] == '>' && c.opts.OnPush != nil {
			if err := c.readPush(rd); err != nil {
				return err
			}
			continue
		}
		// One clock read per read from Redis, for the round-trip
		// histogram only: the replies it brought arrived together. (A
		// clock read per reply was 5% of the proxy's CPU at -P 16.)
		var now time.Time
		if c.opts.ObserveReply != nil {
			now = time.Now()
		}
		c.mu.Lock()
		if c.head == len(c.queue) {
			c.mu.Unlock()
			return errors.New("reply with no request: stream out of step")
		}
		f := c.queue[c.head]
		c.mu.Unlock()
		for {
			p := f.p
			if c.opts.OnPush != nil {
				if b, _ := rd.Peek(1); len(b) > 0 && b[0] == '>' {
					if err := c.readPush(rd); err != nil {
						return err
					}
					if rd.Buffered() > 0 {
						continue
					}
					break // the reply is not here yet: wait for it above
				}
			}
			if err := readReply(p, rd); err != nil {
				return err
			}
			// One critical section retires this request and, if its reply
			// is already buffered, takes the next one: pipelined replies
			// cost one lock each, not two.
			c.mu.Lock()
			c.queue[c.head] = inflight{}
			c.head++
			if c.opts.ReplyTimeout > 0 {
				if c.head == len(c.queue) {
					nc.SetReadDeadline(time.Time{}) // idle: wait for requests as long as it takes
				} else {
					nc.SetReadDeadline(time.Now().Add(c.opts.ReplyTimeout))
				}
			}
			c.retiredLocked()
			next := c.head < len(c.queue) && rd.Buffered() > 0
			var nf inflight
			if next {
				nf = c.queue[c.head]
			}
			c.mu.Unlock()
			if c.opts.ObserveReply != nil {
				c.opts.ObserveReply(now.Sub(f.start))
			}
			p.Done()
			if !next {
				break
			}
			f = nf
		}
	}
}

// fail takes nc out of service (if it is still current) so no new request is
// queued on it; closing it makes readLoop give up and drain the queue.
func (c *Conn) fail(nc net.Conn, cause error) {
	c.mu.Lock()
	if c.nc == nc {
		c.nc = nil
		c.wbuf = c.wbuf[:0]
	}
	c.mu.Unlock()
	nc.Close()
}

func (c *Conn) reconnect() {
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-c.done:
			return
		case <-time.After(backoff):
		}
		nc, err := c.connect()
		if err != nil {
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		if c.loop != nil {
			if err := c.attach(nc); err != nil {
				backoff = min(backoff*2, 2*time.Second)
				continue
			}
			c.opts.Logger.Info("backend connection restored", "addr", c.opts.Addr)
			return
		}
		if !c.install(nc) {
			return
		}
		if !c.synchronous {
			go c.readLoop(nc)
		}
		return
	}
}

// install puts a new connection nc in service, unless the Conn was closed
// meanwhile (nc is then closed, and install reports false).
func (c *Conn) install(nc net.Conn) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return false
	}
	c.nc = nc
	c.mu.Unlock()
	c.opts.Logger.Info("backend connection restored", "addr", c.opts.Addr)
	return true
}

// LocalAddr is the connection's local address as Redis shows it (CLIENT
// LIST's addr), "" while it is down.
func (c *Conn) LocalAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc == nil {
		return ""
	}
	return c.nc.LocalAddr().String()
}

// OnLoop reports whether an event loop serves the connection
// (Options.Loop): a request queued on it waits for nothing, and leaves at
// the end of the loop's pass.
func (c *Conn) OnLoop() bool { return c.loop != nil }

// Up reports whether the connection is established.
func (c *Conn) Up() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nc != nil
}

// Close ends the connection; requests still in flight fail with ErrLost.
func (c *Conn) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	nc := c.nc
	close(c.done)
	c.mu.Unlock()
	if nc != nil {
		c.fail(nc, errors.New("closed"))
	}
}

func trimCRLF(b []byte) string {
	if n := len(b); n >= 2 && b[n-2] == '\r' {
		return string(b[:n-2])
	}
	return string(b)
}

// Pool is a fixed set of Conns to one node. Clients are spread over them;
// one client always uses the same Conn so its requests stay in order.
type Pool struct {
	conns []*Conn
}

// NewPool dials size connections to the node.
func NewPool(opts Options, size int) (*Pool, error) {
	p := &Pool{}
	for range max(size, 1) {
		c, err := Dial(opts)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.conns = append(p.conns, c)
	}
	return p, nil
}

// Conn returns the connection for client number id.
func (p *Pool) Conn(id int64) *Conn { return p.conns[uint64(id)%uint64(len(p.conns))] }

// Close closes every connection.
func (p *Pool) Close() {
	for _, c := range p.conns {
		c.Close()
	}
}

// Up reports whether every connection of the pool is established.
func (p *Pool) Up() bool {
	for _, c := range p.conns {
		if !c.Up() {
			return false
		}
	}
	return true
}
