package tier

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// Leadership is one stretch of this node as the tier's ready leader, from
// its LeaderStart's commit to the loss of leadership: what the token
// authority (internal/authority) runs against while it lasts, as its Store.
// Every method that writes fails with an UnavailableError once it is over.
//
// With Options.Shared, the leader issues no token before Join, and each
// window of tokens it issues from (Join's, and every one NextToken commits
// after it) has been committed to the tier's log AND written to the
// backend by Join's share function (authority: Redis, with WAIT) first, as
// persist's Shared store does with its fsync: so every token is at most
// both copies' bound, and the backend's copy lets a single fenceproxy on
// the same backend (with its own fence store) start above every token the
// tier issued, and the tier above every token it issued.
type Leadership struct {
	n     *Node
	epoch uint64
	done  chan struct{} // closed when the leadership ends
}

// ErrNotShared refuses a token while this leader's window is not yet
// written to the backend (Options.Shared, before Join or after a failed
// share): nothing was issued.
var ErrNotShared = errNotShared{}

type errNotShared struct{}

func (errNotShared) Error() string {
	return "tier: the leader's token bound is not yet written to the backend; no token was issued"
}

func (errNotShared) RESPError() (code, msg string) {
	return "TRYAGAIN", "fenceproxy: the tier's leader is not confirmed as the backend's token authority yet " +
		"(its token bound is not yet written to Redis with the required replicas); nothing was done, retry shortly"
}

// maxShareRounds bounds how often one window meets a backend bound above
// its own (each time the floor goes above that one).
const maxShareRounds = 4

// Done is closed when the leadership ends.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// ID is the tier's id: the store's id, and the authority's.
func (l *Leadership) ID() string { return l.n.TierID() }

// Run is this process's run id.
func (l *Leadership) Run() string { return l.n.run }

// Member is this node's live member on the backend (authority.Options.
// Member): its node id and run, so that no two processes of the tier are
// taken for copies of one another.
func (l *Leadership) Member() string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(l.n.opts.NodeID) + "@" + l.n.run
}

// PreviousRun is true for every other run: any other process that wrote a
// bound under the tier's id was one of its leaders, and a leader shares
// only windows committed to the tier's log, which every later leader
// holds (invariant 2): the tier's bound covers them.
func (l *Leadership) PreviousRun(run string) bool { return run != "" && run != l.n.run }

// SyncedBound is the tier's bound as this leader's state has applied it.
func (l *Leadership) SyncedBound() uint64 { return l.n.fsm.state().bound }

// Floor is the tier's floor.
func (l *Leadership) Floor() uint64 { return l.n.fsm.floorNow() }

// Adopt commits that tokens up to foreign may have been issued without the
// tier: the floor goes above it.
func (l *Leadership) Adopt(foreign uint64) error {
	if !l.n.stillEpoch(l.epoch) {
		return &UnavailableError{Lost: true}
	}
	return l.n.Store().Adopt(foreign)
}

// Join adopts foreign (0: none), then commits a window of tokens and
// shares its bound with share, and from then on shares every window before
// issuing from it. share must raise the backend's copy to at least its
// argument and return the copy after it: a copy found above the window was
// raised by another store, so the floor goes above it and a new window is
// committed (at most maxShareRounds times).
func (l *Leadership) Join(foreign uint64, share func(bound uint64) (uint64, error)) error {
	n := l.n
	n.windowMu.Lock()
	defer n.windowMu.Unlock()
	if !n.stillEpoch(l.epoch) || !n.Ready() {
		return &UnavailableError{Lost: true}
	}
	if foreign > 0 {
		if err := n.adopt(l.epoch, foreign); err != nil {
			return err
		}
	}
	if err := n.newWindow(l.epoch, share); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.epoch != l.epoch {
		return &UnavailableError{Lost: true}
	}
	n.share, n.joined = share, true
	return nil
}

// newWindow commits a new window and, with a share function (Join's),
// writes its bound to the backend, then hands it out (if the leadership
// numbered epoch lasts). The caller holds windowMu (not mu: the commit and
// the share are I/O).
func (n *Node) newWindow(epoch uint64, share func(uint64) (uint64, error)) error {
	for range maxShareRounds {
		e := entry{kind: kindWindow}
		f := n.raft.Apply(e.encode(), applyTimeout)
		if err := f.Error(); err != nil {
			return n.fromRaft(err)
		}
		ws, ok := f.Response().(windowStart)
		if !ok {
			return fmt.Errorf("tier: a window entry was not applied: %v", f.Response())
		}
		if ws.from >= maxToken {
			return errors.New("tier: the token space is exhausted")
		}
		if share != nil {
			got, err := share(ws.to)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrNotShared, err)
			}
			if got > ws.to {
				n.logger.Warn("tier: the token bound on the backend is above the tier's: another fence store issued tokens there; "+
					"tokens up to it are no longer honoured", "backend_bound", got, "bound", ws.to)
				if err := n.adopt(epoch, got); err != nil {
					return err
				}
				continue
			}
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.epoch != epoch {
			return &UnavailableError{Lost: true}
		}
		n.last, n.limit = ws.from, ws.to
		return nil
	}
	return fmt.Errorf("%w: the backend's bound kept rising above the tier's", ErrNotShared)
}

// adopt commits an Adopt: the floor (and the bound) go above token, and
// the counter with them (the next token comes from a new window if that
// passes this one's end). The caller holds windowMu.
func (n *Node) adopt(epoch, token uint64) error {
	above := tokenstate.FloorAbove(token)
	e := entry{kind: kindAdopt, token: above}
	if err := n.raft.Apply(e.encode(), applyTimeout).Error(); err != nil {
		return n.fromRaft(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.epoch != epoch {
		return &UnavailableError{Lost: true}
	}
	n.last = max(n.last, above)
	return nil
}
