// Package fencelock is a Go client for fenceproxy's locks: acquire a lease
// with its fencing token, keep it renewed in the background, and learn
// through a context the moment it is lost.
//
//	lock, err := fencelock.New(rdb).Lock(ctx, "orders:42", 10*time.Second, 5*time.Second)
//	if err != nil { ... }          // ErrNotAcquired: someone else held it throughout
//	defer lock.Unlock(context.Background())
//	ctx := lock.Context()          // cancelled when the lease is lost
//	db.Exec(ctx, "UPDATE orders SET state='closed', fence=$1 WHERE id=42 AND fence < $1", lock.Token)
//
// The lease is renewed every third of its length. If a renewal answers that
// the lease is gone (it ran out, or the resource was taken), or renewals keep
// failing until the lease would have run out, Context is cancelled: stop
// writing. Pass Token with every write the resource can check, or use
// FencedExec for state kept in the same Redis: a paused process may run on
// after its lease, and only the token can stop its writes.
//
// The lease is counted as Redlock counts its validity: from when this
// client sent the request (the only moment it knows to be before the lease
// began), less a clock-drift allowance of 1% of the ttl plus 2 ms; Deadline
// says until when. fenceproxy replies only while its own count, from when it
// received the request, leaves a safety margin. A reply that leaves this
// client's count less than a renewal interval (a grant after waiting in
// line, whose lease began only when it was granted; a request that waited
// for a paused proxy) is renewed at once, and the lease counted from that
// renewal.
//
// # What is never sent twice
//
// go-redis resends a command by itself after a lost connection (EOF), a
// read timeout or a -TRYAGAIN reply (Options.MaxRetries). For a fenced
// write that is a second write: an INCR whose reply was lost or only late
// would run twice. FencedExec is sent once and never resent: when its
// outcome cannot be known (no reply, or fenceproxy's own "may or may not
// have run") it fails with ErrUnknownOutcome, and the caller decides, as
// it would for any write whose reply was lost. A Lock that waits in
// fenceproxy's line reads its reply with a deadline of the wait plus the
// client's ReadTimeout: with the client's deadline alone (5 s by default),
// a wait longer than it would time out, and go-redis would close the
// connection (fenceproxy then drops the waiter from the line) and send
// the request again, at the back of the line.
package fencelock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotAcquired: another owner held the resource (for the whole wait).
var ErrNotAcquired = errors.New("fencelock: held by another owner")

// ErrLost: the lease is no longer held (it ran out or was taken).
var ErrLost = errors.New("fencelock: lease lost")

// ErrStale: FencedExec's token is no longer the newest for its resource (a
// newer one was issued); the command was not run. The error keeps
// fenceproxy's reply as its text ("STALE token ...") and is a redis.Error.
var ErrStale = errors.New("fencelock: stale token")

// ErrUnknownOutcome: FencedExec's command may or may not have run (the
// connection broke or the reply came later than the read timeout, after
// the request was sent; or fenceproxy lost Redis under it). It was not
// sent again: read the state, or repeat the write yourself if it is safe
// to run twice.
var ErrUnknownOutcome = errors.New("fencelock: the fenced command may or may not have run")

// Client acquires locks through a fenceproxy.
type Client struct {
	rdb *redis.Client
}

// New returns a Client using rdb, a go-redis client pointed at fenceproxy.
func New(rdb *redis.Client) *Client { return &Client{rdb: rdb} }

// Lock is a held lease.
type Lock struct {
	Resource string
	Owner    string // unique to this acquisition
	Token    int64  // the fencing token: pass it with every write

	client *Client
	ttl    time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	expires time.Time // see Deadline
}

// drift is Redlock's clock-drift allowance for a lease of ttl: the lease is
// counted as ttl less it.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// leaseFrom is when a lease of ttl ends if it began when its request was
// sent.
func leaseFrom(sent time.Time, ttl time.Duration) time.Time { return sent.Add(ttl - drift(ttl)) }

// TryLock acquires resource for ttl if it is free now.
func (c *Client) TryLock(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	return c.acquire(ctx, resource, ttl, 0)
}

// Lock acquires resource for ttl, waiting in fenceproxy's line (first come,
// first served) up to wait for it.
func (c *Client) Lock(ctx context.Context, resource string, ttl, wait time.Duration) (*Lock, error) {
	return c.acquire(ctx, resource, ttl, wait)
}

func (c *Client) acquire(ctx context.Context, resource string, ttl, wait time.Duration) (*Lock, error) {
	owner, err := newOwner()
	if err != nil {
		return nil, err
	}
	args := []any{"LOCK.ACQUIRE", resource, owner, ttl.Milliseconds()}
	if wait > 0 {
		args = append(args, "WAIT", wait.Milliseconds())
	}
	sent := time.Now()
	token, err := c.waiting(wait).Do(ctx, args...).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, ErrNotAcquired
	case err != nil:
		// -TRYAGAIN among them: the grant came too late to leave a
		// usable lease, and nothing is held.
		return nil, fmt.Errorf("fencelock: LOCK.ACQUIRE %s: %w", resource, err)
	}
	lctx, cancel := context.WithCancelCause(context.Background())
	l := &Lock{
		Resource: resource, Owner: owner, Token: token,
		client: c, ttl: ttl, ctx: lctx, cancel: cancel,
		stop: make(chan struct{}), done: make(chan struct{}),
		expires: leaseFrom(sent, ttl),
	}
	if time.Until(l.expires) < l.interval() {
		// Too little is left by this client's count to wait for the
		// first renewal: renew now, and count from this renewal.
		sent = time.Now()
		n, err := c.rdb.Do(ctx, "LOCK.RENEW", resource, owner, ttl.Milliseconds()).Int64()
		switch {
		case err == nil && n == token:
			l.expires = leaseFrom(sent, ttl)
		case err == nil, errors.Is(err, redis.Nil):
			cancel(ErrLost)
			return nil, fmt.Errorf("%w: the lease ran out before the grant could be used", ErrNotAcquired)
		default:
			// It may be held: give it back rather than leave it to run out.
			l.client.rdb.Do(context.Background(), "LOCK.RELEASE", resource, owner)
			cancel(ErrLost)
			return nil, fmt.Errorf("fencelock: LOCK.RENEW %s right after a late grant: %w", resource, err)
		}
	}
	go l.keepRenewed()
	return l, nil
}

// Deadline is when the lease ends by this client's count, if no renewal
// gets through before then: from when the request that last armed it was
// sent, less the drift allowance.
func (l *Lock) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// interval is how often the lease is renewed.
func (l *Lock) interval() time.Duration { return max(l.ttl/3, time.Millisecond) }

// Context is cancelled, with ErrLost as its cause, the moment the lease is
// known lost or can no longer be renewed; and after Unlock.
func (l *Lock) Context() context.Context { return l.ctx }

// keepRenewed renews every ttl/3 until stopped or lost. The lease's end by
// this client's count cancels Context by itself (lapse), however long a
// renewal hangs.
func (l *Lock) keepRenewed() {
	defer close(l.done)
	lapse := time.AfterFunc(time.Until(l.Deadline()), func() {
		l.cancel(fmt.Errorf("%w: the lease ran out by this client's count before a renewal got through", ErrLost))
	})
	defer lapse.Stop()
	interval := l.interval()
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.ctx, interval)
		sent := time.Now()
		token, err := l.client.rdb.Do(ctx, "LOCK.RENEW", l.Resource, l.Owner, l.ttl.Milliseconds()).Int64()
		cancel()
		switch {
		case err == nil && token == l.Token:
			l.mu.Lock()
			l.expires = leaseFrom(sent, l.ttl)
			l.mu.Unlock()
			lapse.Reset(time.Until(l.Deadline()))
		case errors.Is(err, redis.Nil), err == nil:
			l.cancel(ErrLost) // gone, or (impossibly) another token
			return
		default:
			// -TRYAGAIN, -NOREPLICAS or no answer: the lease may have been
			// re-armed from this request or not at all, so it lasts at
			// least until the earlier of the two ends.
			l.mu.Lock()
			if e := leaseFrom(sent, l.ttl); e.Before(l.expires) {
				l.expires = e
				lapse.Reset(time.Until(e))
			}
			left := time.Until(l.expires)
			l.mu.Unlock()
			if left < interval {
				// Renewals keep failing and the lease is about to run
				// out: assume it did.
				l.cancel(fmt.Errorf("%w: renewals failing: %v", ErrLost, err))
				return
			}
		}
		t.Reset(interval)
	}
}

// Unlock stops the renewals and releases the lease. It returns ErrLost if
// the lease was no longer held.
func (l *Lock) Unlock(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	defer l.cancel(ErrLost)
	n, err := l.client.rdb.Do(ctx, "LOCK.RELEASE", l.Resource, l.Owner).Int64()
	if err != nil {
		return fmt.Errorf("fencelock: LOCK.RELEASE %s: %w", l.Resource, err)
	}
	if n == 0 {
		return ErrLost
	}
	return nil
}

// Check asks fenceproxy whether this lock's token is still the newest for
// its resource (FENCE.CHECK).
func (l *Lock) Check(ctx context.Context) (bool, error) {
	n, err := l.client.rdb.Do(ctx, "FENCE.CHECK", l.Resource, l.Token).Int64()
	return n == 1, err
}

// waiting is the client a request that may wait in fenceproxy's line for
// wait uses: one whose read deadline is the wait plus the client's own
// ReadTimeout, so that the reply to a request still in line is never
// given up (and the request resent, at the back of the line) before the
// wait is over. It shares rdb's connections and hooks.
func (c *Client) waiting(wait time.Duration) *redis.Client {
	read := c.rdb.Options().ReadTimeout
	if wait <= 0 || read <= 0 {
		return c.rdb // no wait, or no read deadline at all
	}
	return c.rdb.WithTimeout(wait + read)
}

// FencedExec runs one command in Redis only if this lock's token is still
// the newest for its resource (FENCE.EXEC). A stale token gets an error
// that is ErrStale (errors.Is) and the command does not run. The request is
// sent once: go-redis's own retries are off for it, and an outcome that
// cannot be known (a lost connection or a late reply after sending, or
// fenceproxy's "may or may not have run") is an error that is
// ErrUnknownOutcome, never a second run.
func (l *Lock) FencedExec(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, append([]any{"FENCE.EXEC", l.Resource, l.Token}, args...)...)
	if err := l.client.rdb.Process(ctx, sendOnce{cmd}); err != nil && !errors.Is(err, redis.Nil) {
		cmd.SetErr(fencedExecError(l.Resource, err))
	}
	return cmd
}

// sendOnce is a command that go-redis never resends (Cmder.NoRetry):
// whatever its MaxRetries, a failure after the request may have reached the
// server is returned as it is. (A failure go-redis knows came before the
// request was written is still tried again: that is its first run.)
type sendOnce struct{ *redis.Cmd }

func (sendOnce) NoRetry() bool { return true }

// fencedExecError makes FencedExec's failure say what is known of the
// command's outcome: not run (STALE, another reply from fenceproxy or
// Redis, no connection made), or unknown.
func fencedExecError(resource string, err error) error {
	var reply redis.Error
	switch {
	case errors.As(err, &reply) && strings.HasPrefix(err.Error(), "STALE "):
		return staleError{reply: reply}
	case errors.As(err, &reply) && !strings.Contains(err.Error(), "may or may not"):
		return err // a reply: the command did not run (or ran and failed)
	case notSent(err):
		return err
	}
	return fmt.Errorf("%w (FENCE.EXEC %s, not resent): %w", ErrUnknownOutcome, resource, err)
}

// notSent reports whether err says the request never left this client: no
// connection could be had or made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) ||
		errors.As(err, &op) && op.Op == "dial"
}

// staleError is fenceproxy's STALE reply, which errors.Is ErrStale and
// stays a redis.Error with the reply's text.
type staleError struct{ reply redis.Error }

func (e staleError) Error() string      { return e.reply.Error() }
func (e staleError) RedisError()        {}
func (e staleError) Unwrap() error      { return e.reply }
func (staleError) Is(target error) bool { return target == ErrStale }

func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fencelock: owner id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
