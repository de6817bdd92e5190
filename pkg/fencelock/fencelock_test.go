package fencelock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/pkg/fencelock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func setup(t *testing.T) (*fencelock.Client, *testenv.Redis) {
	t.Helper()
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: r.Addr, MinReplicas: 0})
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	return fencelock.New(rdb), r
}

// TestRenewalKeepsLease: a lock held for three times its lease stays held,
// and others are refused meanwhile.
func TestRenewalKeepsLease(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	l, err := c.Lock(ctx, "job", 300*time.Millisecond, time.Second)
	if err != nil || l.Token <= 0 {
		t.Fatalf("Lock = %+v, %v", l, err)
	}
	time.Sleep(900 * time.Millisecond)
	if _, err := c.TryLock(ctx, "job", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryLock by another while renewed = %v, want ErrNotAcquired", err)
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lease context ended while renewed: %v", context.Cause(l.Context()))
	}
	if ok, err := l.Check(ctx); !ok || err != nil {
		t.Fatalf("Check = %v, %v", ok, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Context().Err() == nil {
		t.Fatal("lease context not cancelled after Unlock")
	}
	if l2, err := c.TryLock(ctx, "job", time.Second); err != nil {
		t.Fatalf("TryLock after Unlock = %v", err)
	} else if l2.Token <= l.Token {
		t.Fatalf("next token %d not above %d", l2.Token, l.Token)
	}
}

// TestLostLeaseCancelsContext: when the lease is lost (its record gone, as
// after Redis lost its data) and another owner takes the resource, the old
// holder's context is cancelled with ErrLost, and its fenced writes are
// refused.
func TestLostLeaseCancelsContext(t *testing.T) {
	c, r := setup(t)
	ctx := context.Background()
	old, err := c.Lock(ctx, "order:9", 600*time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	direct := testenv.Dial(t, r.Addr)
	direct.Do("DEL", "fenceproxy:lock:{order:9}")
	next, err := c.TryLock(ctx, "order:9", 5*time.Second)
	if err != nil {
		t.Fatalf("TryLock after the lease was lost = %v", err)
	}
	select {
	case <-old.Context().Done():
		if !errors.Is(context.Cause(old.Context()), fencelock.ErrLost) {
			t.Fatalf("cause = %v, want ErrLost", context.Cause(old.Context()))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the old holder's context was not cancelled within 3s of losing its lease")
	}
	if ok, _ := old.Check(ctx); ok {
		t.Fatal("Check says the old token is current")
	}
	if err := old.FencedExec(ctx, "SET", "order:9:state", "late").Err(); err == nil || !strings.HasPrefix(err.Error(), "STALE") {
		t.Fatalf("old FencedExec = %v, want STALE", err)
	}
	if err := next.FencedExec(ctx, "SET", "order:9:state", "ok").Err(); err != nil {
		t.Fatalf("new FencedExec = %v", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("old Unlock = %v, want ErrLost", err)
	}
	next.Unlock(ctx)
}

// sendTimes is a go-redis hook that notes when each command is handed to
// the connection (after fencelock's own clock read, so never before it).
type sendTimes struct {
	mu   sync.Mutex
	sent []sent
}

type sent struct {
	name string
	at   time.Time
}

func (s *sendTimes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *sendTimes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *sendTimes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.sent = append(s.sent, sent{strings.ToUpper(cmd.Name()), time.Now()})
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

// last is when name was last sent (zero if never).
func (s *sendTimes) last(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.sent) - 1; i >= 0; i-- {
		if s.sent[i].name == name {
			return s.sent[i].at
		}
	}
	return time.Time{}
}

func hooked(t *testing.T) (*fencelock.Client, *sendTimes, *testenv.Proxy, *redis.Client) {
	t.Helper()
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: r.Addr, MinReplicas: 0})
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: 2, ReadTimeout: 20 * time.Second, PoolSize: 4})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil { // connected before any stop
		t.Fatal(err)
	}
	hook := &sendTimes{}
	rdb.AddHook(hook)
	return fencelock.New(rdb), hook, p, rdb
}

// TestLeaseCountedFromSend: the lease runs from when the client sent the
// request, not from the reply. The proxy is stopped while the request
// waits unread (it then grants a whole lease from when it reads it), and
// stopped again right after the grant so that no renewal gets through: the
// lock's context must end by the time the request was sent plus the ttl,
// not a ttl after the late reply.
func TestLeaseCountedFromSend(t *testing.T) {
	c, hook, p, _ := hooked(t)
	const ttl = 6 * time.Second
	p.Stop()
	type result struct {
		l   *fencelock.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.TryLock(context.Background(), "late-reply", ttl)
		done <- result{l, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for hook.last("LOCK.ACQUIRE").IsZero() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(ttl / 3) // the reply comes this much later than the send
	p.Cont()
	res := <-done
	if res.err != nil {
		t.Fatalf("TryLock = %v", res.err)
	}
	p.Stop()
	defer p.Cont()
	sentAt := hook.last("LOCK.ACQUIRE")
	at := make(chan time.Time, 1)
	stopWatch := context.AfterFunc(res.l.Context(), func() { at <- time.Now() })
	defer stopWatch()
	var cancelled time.Time
	select {
	case cancelled = <-at:
	case <-time.After(2 * ttl):
		t.Fatal("the lock's context was not cancelled although no renewal could get through")
	}
	// Deadline is exact; the context's end is a timer's, which a loaded
	// machine fires late. Counted from the reply it would end ttl/3 later
	// than from the send: the check sits halfway between the two.
	if d := res.l.Deadline(); d.After(sentAt.Add(ttl)) {
		t.Fatalf("Deadline is %v after the send, beyond the ttl %v", d.Sub(sentAt), ttl)
	}
	if limit := sentAt.Add(ttl + ttl/6); cancelled.After(limit) {
		t.Fatalf("the context ended %v after the acquire was sent, well past its lease of %v (counted from the reply, not the send)",
			cancelled.Sub(sentAt), ttl)
	}
}

// TestWaitedGrantRenewsAtOnce: a Lock that waited in line most of its ttl
// got a lease that began at the grant; counted from its send, almost
// nothing is left. It must renew at once and count from that renewal.
func TestWaitedGrantRenewsAtOnce(t *testing.T) {
	c, hook, _, rdb := hooked(t)
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	if err := rdb.Do(ctx, "LOCK.ACQUIRE", "waited", "other", 900).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctx, "waited", ttl, 5*time.Second)
	if err != nil {
		t.Fatalf("Lock = %v", err)
	}
	defer l.Unlock(ctx)
	acq, ren := hook.last("LOCK.ACQUIRE"), hook.last("LOCK.RENEW")
	if ren.Before(acq) {
		t.Fatal("a grant that waited longer than its ttl was not renewed at once")
	}
	if l.Context().Err() != nil {
		t.Fatalf("the lease was given up: %v", context.Cause(l.Context()))
	}
	if d := l.Deadline(); d.After(ren.Add(ttl)) || !d.After(acq.Add(ttl)) {
		t.Fatalf("Deadline %v after the acquire's send, %v after the renewal's: want it counted from the renewal", d.Sub(acq), d.Sub(ren))
	}
}

// linked is a proxy with a Link in front of it, a go-redis client through
// the Link with readTimeout, and a direct connection to Redis.
func linked(t *testing.T, readTimeout time.Duration, hooks ...redis.Hook) (*fencelock.Client, *testenv.Link, *testenv.Conn) {
	t.Helper()
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: r.Addr, MinReplicas: 0})
	link := testenv.StartLink(t, p.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: link.Addr, Protocol: 2, ReadTimeout: readTimeout})
	t.Cleanup(func() { rdb.Close() })
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	return fencelock.New(rdb), link, testenv.Dial(t, r.Addr)
}

// waitCounter waits until key (read directly on Redis) is at least 1 and
// returns it.
func waitCounter(t *testing.T, direct *testenv.Conn, key string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := string(direct.Do("GET", key))
		if got != "$-1\r\n" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never written", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// redialGate is a go-redis hook that holds every dial after the first
// until open is closed, and says on redialing that one began: a retry
// after a read timeout dials anew (the timed-out connection is dropped).
type redialGate struct {
	dials     atomic.Int32
	redialing chan struct{}
	once      sync.Once
	open      chan struct{}
}

func newRedialGate() *redialGate {
	return &redialGate{redialing: make(chan struct{}), open: make(chan struct{})}
}

func (g *redialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.dials.Add(1) > 1 {
			g.once.Do(func() { close(g.redialing) })
			<-g.open
		}
		return next(ctx, network, addr)
	}
}
func (g *redialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *redialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFencedExecLateReplyRunsOnce: the reply to FencedExec(INCR) comes
// later than the client's read timeout (the link delays it), and only
// that reply: the link heals before go-redis's next connection is made.
// go-redis would send the INCR again on that connection after the timeout
// and report success with the counter at 2; fencelock must not resend:
// the counter goes up once, and the caller gets ErrUnknownOutcome.
func TestFencedExecLateReplyRunsOnce(t *testing.T) {
	gate := newRedialGate()
	c, link, direct := linked(t, 300*time.Millisecond, gate)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "ctr", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	link.Delay(t, testenv.Downstream, 3*time.Second)
	done := make(chan error, 1)
	go func() { done <- l.FencedExec(ctx, "INCR", "ctr:n").Err() }()
	select {
	case <-gate.redialing: // the read timed out and go-redis is about to resend
	case err = <-done: // the read timed out and FencedExec gave up
		done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("FencedExec neither returned nor redialled")
	}
	link.Heal(t)
	close(gate.open)
	err = <-done
	if !errors.Is(err, fencelock.ErrUnknownOutcome) {
		t.Errorf("FencedExec with its reply later than the read timeout = %v, want ErrUnknownOutcome", err)
	}
	if got := waitCounter(t, direct, "ctr:n"); got != "$1\r\n1\r\n" {
		t.Fatalf("counter after one FencedExec(INCR) whose reply came late = %q, want 1: the INCR was resent", got)
	}
	if err := l.FencedExec(ctx, "INCR", "ctr:n").Err(); err != nil {
		t.Fatalf("FencedExec once the link healed = %v", err)
	}
}

// TestFencedExecLostReplyRunsOnce: the connection breaks after fenceproxy
// ran FencedExec(INCR) and before its reply arrived. go-redis would resend
// the INCR on a new connection after the EOF and report success with the
// counter at 2; fencelock must return ErrUnknownOutcome with the counter
// at 1.
func TestFencedExecLostReplyRunsOnce(t *testing.T) {
	c, link, direct := linked(t, 20*time.Second)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "ctr", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	link.Drop(t, testenv.Downstream) // replies are lost; Heal closes the connection
	done := make(chan error, 1)
	go func() { done <- l.FencedExec(ctx, "INCR", "ctr:n").Err() }()
	waitCounter(t, direct, "ctr:n") // fenceproxy ran it
	link.Heal(t)
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("FencedExec did not return after its connection was closed")
	}
	if !errors.Is(err, fencelock.ErrUnknownOutcome) {
		t.Errorf("FencedExec whose connection broke after it ran = %v, want ErrUnknownOutcome", err)
	}
	if got := string(direct.Do("GET", "ctr:n")); got != "$1\r\n1\r\n" {
		t.Fatalf("counter after one FencedExec(INCR) whose reply was lost = %q, want 1: the INCR was resent", got)
	}
}

// TestFencedExecStaleIsErrStale: a stale token's refusal is ErrStale and
// still fenceproxy's STALE reply.
func TestFencedExecStaleIsErrStale(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	old, err := c.TryLock(ctx, "st", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	old.Unlock(ctx)
	next, err := c.TryLock(ctx, "st", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Unlock(ctx)
	err = old.FencedExec(ctx, "SET", "st:v", "late").Err()
	var reply redis.Error
	if !errors.Is(err, fencelock.ErrStale) || !errors.As(err, &reply) || !strings.HasPrefix(err.Error(), "STALE") {
		t.Fatalf("stale FencedExec = %v, want ErrStale, a redis.Error reading STALE ...", err)
	}
}

// TestWaitingLockKeepsItsPlace: a Lock waiting up to 20 s, with the
// client's read timeout 3 s (shorter than the wait; go-redis's default is
// 5 s), keeps its place in line. Before the fix the read timeout fired while it waited, go-redis
// closed the connection (fenceproxy dropped it from the line) and sent it
// again, behind a client that had come after it, which was granted first.
func TestWaitingLockKeepsItsPlace(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: r.Addr, MinReplicas: 0})
	const readTimeout = 3 * time.Second
	client := func(readTimeout time.Duration) *fencelock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: 2, ReadTimeout: readTimeout})
		t.Cleanup(func() { rdb.Close() })
		return fencelock.New(rdb)
	}
	holder := testenv.Dial(t, p.Addr)
	if got := string(holder.Do("LOCK.ACQUIRE", "line", "holder", "60000")); got[0] != ':' {
		t.Fatalf("holder's LOCK.ACQUIRE = %q", got)
	}
	info := testenv.Dial(t, p.Addr)
	waitWaiters := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			li, err := testenv.ParseLockInfo(info.Do("LOCK.INFO", "line"))
			if err == nil && li.Waiters == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("never %d waiters (LOCK.INFO %+v, %v)", n, li, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	type result struct {
		who   string
		token int64
		err   error
	}
	results := make(chan result, 2)
	first := time.Now()
	wait := func(who string, c *fencelock.Client) {
		l, err := c.Lock(context.Background(), "line", 2*time.Second, 20*time.Second)
		if err != nil {
			results <- result{who, 0, err}
			return
		}
		results <- result{who, l.Token, nil}
		l.Unlock(context.Background())
	}
	go wait("first", client(readTimeout))
	waitWaiters(1)
	// The second's read timeout is longer than the test: only the first's
	// can fire.
	go wait("second", client(time.Minute))
	waitWaiters(2)
	// Let the first waiter's read timeout pass (it fired here before the
	// fix), then hand the lock on.
	time.Sleep(time.Until(first.Add(readTimeout + time.Second)))
	holder.Do("LOCK.RELEASE", "line", "holder")
	got := map[string]int64{}
	for range 2 {
		res := <-results
		if res.err != nil {
			t.Fatalf("%s waiter's Lock = %v", res.who, res.err)
		}
		got[res.who] = res.token
	}
	if got["second"] < got["first"] {
		t.Fatalf("the second waiter was granted first (tokens: first %d, second %d): the first lost its place in line when its read timeout fired",
			got["first"], got["second"])
	}
}
