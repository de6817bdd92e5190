package authority

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Leadership is one stretch of a node as the leader of a replicated token
// store (internal/tier's *Leadership): the Store an Authority runs on
// while it lasts.
type Leadership interface {
	Store
	// Done is closed when the leadership ends.
	Done() <-chan struct{}
	// Member is this node's live member (Options.Member).
	Member() string
}

// LeaderOptions configure a Leader.
type LeaderOptions struct {
	// Serving is where the Authority that serves is published: stored
	// when one starts serving, swapped back to nil when it stops (unless
	// another was stored meanwhile). Lock commands consult it.
	Serving *atomic.Pointer[Authority]
	// OnServing, if set, is told each Authority once it serves (after it
	// is published).
	OnServing func(*Authority)
}

// Leader runs the token authority on a node while it leads a replicated
// store: one Authority per Leadership, under the store's id, with a live
// member of the node's own. So the store's nodes are each other's peers, a
// single fenceproxy with another fence store on the same backend and key
// prefix is refused and refuses, the bound in Redis is the store's, and a
// new leader starts its own heartbeat while the old one's member runs out
// (or leaves, on a clean stop). Safe for concurrent use.
//
// Nothing runs before Start (the backend and the lock writer are up), and
// nothing after Close.
type Leader struct {
	opts    LeaderOptions
	auth    Options       // set by Start
	started chan struct{} // closed by Start
	closing chan struct{} // closed by Close
	mu      sync.Mutex
	closed  bool
	wg      sync.WaitGroup // the Lead calls running
}

// NewLeader returns a Leader that runs nothing until Start.
func NewLeader(opts LeaderOptions) *Leader {
	return &Leader{opts: opts, started: make(chan struct{}), closing: make(chan struct{})}
}

// Start lets leaderships run the authority with opts, once the backend
// and the lock writer are up: every leadership's Authority has opts but
// for Store, ID and Member, which each Leadership gives, and StartAlone,
// which stays off (the node's process already serves). Call it once.
func (ld *Leader) Start(opts Options) {
	opts.StartAlone = false
	ld.auth = opts
	close(ld.started)
}

// Close ends the current leadership's authority (its member leaves Redis)
// and lets no new one start. It returns once every Lead has.
func (ld *Leader) Close() {
	ld.mu.Lock()
	if !ld.closed {
		ld.closed = true
		close(ld.closing)
	}
	ld.mu.Unlock()
	ld.wg.Wait()
}

// Lead runs the authority while l lasts (internal/tier's
// Options.OnLeading): it waits for Start, then starts an Authority on l,
// retrying every DefaultInterval while the heartbeat cannot run at all
// (Redis unreachable: lock commands wait, -TRYAGAIN), publishes it while
// it serves, and closes it when l ends or the Leader closes.
func (ld *Leader) Lead(l Leadership) {
	ld.mu.Lock()
	if ld.closed {
		ld.mu.Unlock()
		return
	}
	ld.wg.Add(1)
	ld.mu.Unlock()
	defer ld.wg.Done()
	select {
	case <-ld.started:
	case <-l.Done():
		return
	case <-ld.closing:
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.Done():
		case <-ld.closing:
		case <-ctx.Done():
		}
		cancel()
	}()
	opts := ld.auth // written before started was closed
	opts.Store, opts.ID, opts.Member = l, l.ID(), l.Member()
	a := New(opts)
	if !ld.startAuthority(ctx, a) {
		return
	}
	ld.opts.Serving.Store(a)
	if ld.opts.OnServing != nil {
		ld.opts.OnServing(a)
	}
	a.opts.Logger.Info("tier: this leader is the backend's token authority", "authority_id", opts.ID, "member", opts.Member)
	<-ctx.Done()
	ld.opts.Serving.CompareAndSwap(a, nil)
	a.Close()
}

// startAuthority starts a, again every DefaultInterval while it fails,
// until ctx ends (false).
func (ld *Leader) startAuthority(ctx context.Context, a *Authority) bool {
	for {
		err := a.Start(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		a.opts.Logger.Warn("tier: the leader's token authority cannot beat on Redis yet; lock commands wait", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(DefaultInterval):
		}
	}
}
