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
package fencelock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotAcquired: another owner held the resource (for the whole wait).
var ErrNotAcquired = errors.New("fencelock: held by another owner")

// ErrLost: the lease is no longer held (it ran out or was taken).
var ErrLost = errors.New("fencelock: lease lost")

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
}

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
	token, err := c.rdb.Do(ctx, args...).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, ErrNotAcquired
	case err != nil:
		return nil, fmt.Errorf("fencelock: LOCK.ACQUIRE %s: %w", resource, err)
	}
	lctx, cancel := context.WithCancelCause(context.Background())
	l := &Lock{
		Resource: resource, Owner: owner, Token: token,
		client: c, ttl: ttl, ctx: lctx, cancel: cancel,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go l.keepRenewed(time.Now().Add(ttl))
	return l, nil
}

// Context is cancelled, with ErrLost as its cause, the moment the lease is
// known lost or can no longer be renewed; and after Unlock.
func (l *Lock) Context() context.Context { return l.ctx }

// keepRenewed renews every ttl/3 until stopped or lost. expires is when the
// lease runs out if no renewal gets through.
func (l *Lock) keepRenewed(expires time.Time) {
	defer close(l.done)
	interval := max(l.ttl/3, time.Millisecond)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		token, err := l.client.rdb.Do(ctx, "LOCK.RENEW", l.Resource, l.Owner, l.ttl.Milliseconds()).Int64()
		cancel()
		switch {
		case err == nil && token == l.Token:
			expires = time.Now().Add(l.ttl)
		case errors.Is(err, redis.Nil), err == nil:
			l.cancel(ErrLost) // gone, or (impossibly) another token
			return
		case time.Until(expires) < interval:
			// Renewals keep failing and the lease is about to run out:
			// assume it did.
			l.cancel(fmt.Errorf("%w: renewals failing: %v", ErrLost, err))
			return
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

// FencedExec runs one command in Redis only if this lock's token is still
// the newest for its resource (FENCE.EXEC); a stale token gets a STALE error
// and the command does not run.
func (l *Lock) FencedExec(ctx context.Context, args ...any) *redis.Cmd {
	return l.client.rdb.Do(ctx, append([]any{"FENCE.EXEC", l.Resource, l.Token}, args...)...)
}

func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fencelock: owner id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
