package authority

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

const (
	// DefaultInterval is the time between heartbeat rounds.
	DefaultInterval = 500 * time.Millisecond
	// MinInterval and MaxInterval bound Options.Interval.
	MinInterval = 50 * time.Millisecond
	MaxInterval = 10 * time.Second
	// maxMembers bounds the live members one round reads.
	maxMembers = 64
	// roundTimeout bounds one round, a scan of the owner records included.
	roundTimeout = 30 * time.Second
)

// Store is the token store an Authority keeps honest on the backend: a
// single node's fence store (*persist.Store, opened with
// persist.Options.Shared), or a tier's replicated state on its leader
// (*tier.Leadership).
type Store interface {
	// ID names the store: in the bound it raises in Redis, and (unless
	// Options.Member names it otherwise) in this process's live member.
	ID() string
	// Run is this process's run id, random at every start.
	Run() string
	// PreviousRun reports whether run is another process of this store
	// whose shared bounds this store's SyncedBound covers: a process that
	// ran on the same directory before (persist), any other leader of the
	// same tier (tier).
	PreviousRun(run string) bool
	// SyncedBound is the store's own durable bound: never below a bound
	// it has shared.
	SyncedBound() uint64
	// Floor is the store's token floor.
	Floor() uint64
	// Adopt durably raises the floor above foreign (tokens up to it may
	// have been issued without this store).
	Adopt(foreign uint64) error
	// Join adopts foreign (0: none), then reserves a window of tokens,
	// shares its bound with share and only then issues from it (and from
	// every later window, each shared the same way).
	Join(foreign uint64, share func(bound uint64) (uint64, error)) error
}

// Options configure an Authority.
type Options struct {
	Backend upstream.Backend
	// Writer (required) sends the shared bound with its WAIT on a lock
	// connection: the lock manager's Writer, one per backend.
	Writer *lockwriter.Writer
	// Store is the token store: the fence store, or a tier's leadership.
	Store Store
	// KeyPrefix is the owner records' --key-prefix: the authority's keys
	// live under it, so proxies with other prefixes (other namespaces of
	// resources) are not each other's conflict.
	KeyPrefix string
	// MinReplicas must acknowledge a shared bound (WAIT); ReplicaTimeout
	// bounds that wait and is part of the grace that covers a grant in
	// flight (invariant 3).
	MinReplicas    int
	ReplicaTimeout time.Duration
	// Interval between heartbeat rounds; DefaultInterval if zero, clamped
	// to [MinInterval, MaxInterval].
	Interval time.Duration
	// ID names the token authority in the heartbeat: the store's id if
	// empty (a tier of fenceproxy nodes passes the tier's id).
	ID string
	// Member is the first part of this process's live member (invariant
	// 4): the store's id if empty. A tier's leader passes one of its own
	// node and process, so that the tier's nodes, which share one store
	// and one authority id, are each other's peers, never copies.
	Member string
	// StartAlone makes Start fail with a *ConflictError, having written
	// nothing to Redis, when another token authority is live on the
	// backend: a process that is starting steps back rather than make the
	// one already serving refuse lock commands (invariant 3 makes both
	// refuse once both members are in the live set). A tier's leader
	// leaves it off: its process is already serving.
	StartAlone bool
	Logger     *slog.Logger
}

// Authority is this process's seat as the backend's token authority. Safe
// for concurrent use; Admit is cheap enough for every lock command.
type Authority struct {
	opts              Options
	id                string
	boundKey, liveKey string
	member            string
	memberStore       string // the member's first part (Options.Member)
	validFor, liveFor time.Duration
	// began is when this process began, on its own clock (Unix ms): a
	// predecessor's heartbeat sent before it was sent by a process that
	// had ended by then, or by a live copy that renews again (classify).
	began      int64
	status     atomic.Pointer[status]
	redisBound atomic.Uint64
	// db is the database the keys live in (keysDB), -1 until found; the
	// loop's goroutine finds it again after a round that failed (a
	// failover may have brought a Redis with fewer databases). Close
	// reads it too.
	db                 atomic.Int64
	kick, done, exited chan struct{}
	stopOnce           sync.Once
	// publishedMu guards published, closed and replaced by every publish:
	// AdmitWithin waits on it for a round's news.
	publishedMu sync.Mutex
	published   chan struct{}

	// Touched by Start and then by the loop's goroutine only.
	joined      bool
	conflicted  bool              // a conflict was seen since start
	cleanRounds int               // rounds without a conflict since the last one
	scanned     bool              // the records were scanned while the Redis bound was missing
	firstSeen   map[string]string // a predecessor's member -> its score when first seen (or last moved by a late heartbeat)
	liveRuns    map[string]bool   // run ids taken for predecessors but seen renewing
	lastErr     string
	lastErrAt   time.Time
}

// status is what the last round found.
type status struct {
	joined     bool
	conflict   *ConflictError
	shortfall  *NoReplicasError // why the store could not join, if for want of replicas
	validUntil time.Time        // lock commands are admitted before it (monotonic)
}

// New returns an Authority; Start runs its first round.
func New(opts Options) *Authority {
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	opts.Interval = min(max(opts.Interval, MinInterval), MaxInterval)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "fenceproxy:lock:"
	}
	a := &Authority{
		opts:      opts,
		id:        opts.ID,
		boundKey:  Keys(opts.KeyPrefix)[1],
		liveKey:   Keys(opts.KeyPrefix)[0],
		validFor:  2 * opts.Interval,
		kick:      make(chan struct{}, 1),
		firstSeen: map[string]string{},
		liveRuns:  map[string]bool{},
		done:      make(chan struct{}),
		exited:    make(chan struct{}),
		published: make(chan struct{}),
		began:     time.Now().UnixMilli(),
	}
	if a.id == "" {
		a.id = opts.Store.ID()
	}
	a.memberStore = opts.Member
	if a.memberStore == "" {
		a.memberStore = opts.Store.ID()
	}
	// The grace: a grant admitted just before validFor ran out may still
	// be waiting for its replicas, and clocks drift.
	a.liveFor = a.validFor + opts.ReplicaTimeout + time.Second
	a.member = a.memberStore + "/" + opts.Store.Run() + "/" + a.id
	a.status.Store(&status{})
	a.db.Store(-1)
	return a
}

// errHeartbeat marks a round that could not run its heartbeat at all.
var errHeartbeat = errors.New("heartbeat")

// Start runs the first heartbeat round, and joins the fence store if no
// other authority is live, before it returns; then it keeps beating until
// Close. It fails only if the heartbeat cannot run at all (the message
// says why); a conflict or a bound that cannot be written yet leaves lock
// commands refused (Admit) until a later round succeeds.
//
// A round that fails otherwise is tried again, every quarter interval, for
// up to startPatience (bounded by ctx): at start a replica is often still
// catching up and cannot acknowledge the bound yet, and a proxy that
// answers lock commands -NOREPLICAS for its first moments, with replicas
// about to be in sync, only makes every client retry.
func (a *Authority) Start(ctx context.Context) error {
	if a.opts.StartAlone {
		if err := a.awaitAlone(ctx); err != nil {
			return err
		}
	}
	giveUp := time.Now().Add(startPatience)
	for {
		err := a.round(ctx)
		if errors.Is(err, errHeartbeat) {
			return fmt.Errorf("writing the token authority's heartbeat (%s): %w", a.liveKey, errors.Unwrap(err))
		}
		if err == nil {
			break
		}
		if time.Now().After(giveUp) || ctx.Err() != nil {
			a.logError(err)
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.opts.Interval / 4):
		}
	}
	go a.loop()
	return nil
}

// awaitAlone reads the live set, without writing this process's member,
// until no other authority's member is in it (Options.StartAlone). A
// member seen renewing (its score moved between two reads) is a live
// process: awaitAlone returns the conflict, and that process never sees
// this one. A member that does not renew is a process that stopped
// without leaving (kill -9) whose member has not run out yet: awaitAlone
// waits for it to run out (its live-for, a few seconds), within ctx.
func (a *Authority) awaitAlone(ctx context.Context) error {
	firstScore := map[string]string{}
	for {
		hb, err := a.readLive(ctx, true)
		if err != nil {
			return fmt.Errorf("reading the token authority's live set (%s): %w", a.liveKey, err)
		}
		c, _ := a.classify(hb)
		if c == nil {
			return nil
		}
		for m, score := range c.members {
			if first, seen := firstScore[m]; seen && first != score && a.sentSinceBegan(hb, m) {
				return c
			}
			firstScore[m] = score
		}
		select {
		case <-ctx.Done():
			return c
		case <-time.After(a.opts.Interval / 4):
		}
	}
}

// startPatience bounds how long Start retries a first round that failed
// for a reason that may pass by itself (a replica not yet in sync).
const startPatience = 3 * time.Second

// Admit returns nil if lock commands may issue or judge tokens now: the
// last round found no other live authority, the store has joined, and the
// round is recent (invariant 3). Otherwise a *ConflictError or
// ErrUnconfirmed.
func (a *Authority) Admit() error {
	st := a.status.Load()
	switch {
	case st.conflict != nil:
		return st.conflict
	case !st.joined && st.shortfall != nil:
		return st.shortfall
	case !st.joined || time.Now().After(st.validUntil):
		return ErrUnconfirmed
	}
	return nil
}

// AdmitWithin is Admit for a command that may wait: when the only reason
// to refuse is a round that is late (ErrUnconfirmed: a scheduling stall, a
// slow Redis reply, a pause of this process), it asks for a round at once
// and waits for it, up to two intervals (or ctx), before it refuses. A late
// heartbeat is then a client's latency, not its TRYAGAIN; a heartbeat that
// cannot run (Redis down) still refuses, one round's patience later. A
// conflict or a replica shortfall refuses at once: a round does not end
// either soon.
func (a *Authority) AdmitWithin(ctx context.Context) error {
	err := a.Admit()
	if err != ErrUnconfirmed {
		return err
	}
	patience := time.NewTimer(a.validFor)
	defer patience.Stop()
	for {
		a.publishedMu.Lock()
		news := a.published
		a.publishedMu.Unlock()
		if err = a.Admit(); err != ErrUnconfirmed {
			return err
		}
		a.Recheck()
		select {
		case <-news:
		case <-patience.C:
			return a.Admit()
		case <-a.done:
			return a.Admit()
		case <-ctx.Done():
			return err
		}
	}
}

// Recheck asks for a round now, without waiting for it: for the backend
// to call when its master changed (a failover), so that a bound the new
// master lacks is rewritten at once.
func (a *Authority) Recheck() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Close stops the heartbeat and takes this process's member off the live
// set, so another process need not wait for it to expire.
func (a *Authority) Close() {
	a.stopOnce.Do(func() {
		close(a.done)
		<-a.exited
		a.status.Store(&status{})
		if node := a.opts.Backend.MasterForKey([]byte(a.liveKey)); node != nil && a.db.Load() >= 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = leaveScript.Run(ctx, node.Client, []string{a.liveKey, a.boundKey}, a.member, a.db.Load()).Err()
			cancel()
		}
	})
}

func (a *Authority) loop() {
	defer close(a.exited)
	t := time.NewTimer(a.opts.Interval)
	defer t.Stop()
	var ended time.Time // when the last round ended
	for {
		select {
		case <-a.done:
			return
		case <-t.C:
		case <-a.kick:
			// Asked for a round (a lock command found the last one late,
			// or the master changed): at once, but not sooner than a
			// quarter interval after the last one ended, so that the lock
			// commands of a Redis outage, each asking, do not run failing
			// rounds back to back. (The timer is never due sooner.)
			if wait := time.Until(ended.Add(a.opts.Interval / 4)); wait > 0 {
				t.Reset(wait)
				continue
			}
		}
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
		err := a.round(ctx)
		cancel()
		ended = time.Now()
		// Rounds begin an interval apart, however long one took: a round
		// confirms for two intervals from its beginning, so a slow round
		// must not push the next one toward the end of that. (A quarter
		// interval at least between rounds, so that a slow Redis is not
		// asked again the moment it answers.)
		next := max(a.opts.Interval-ended.Sub(began), a.opts.Interval/4)
		if err != nil {
			a.logError(err)
			next = a.opts.Interval / 4 // soon again: lock commands wait for a good round
		}
		t.Reset(next) // (since Go 1.23 a Reset timer delivers no stale value)
	}
}

// heartbeat is what one round read from Redis.
type heartbeat struct {
	members    map[string]string // live member -> its score, as Redis wrote it
	sent       map[string]int64  // live member -> when its last heartbeat was sent (its sender's clock, Unix ms); absent if unknown
	bound      uint64            // 0: missing
	store, run string            // who raised the bound last
}

// round is one heartbeat: write this member, read the others and the
// bound, then join, adopt or rewrite the bound as invariant 2 says, and
// publish what lock commands may do.
func (a *Authority) round(ctx context.Context) error {
	began := time.Now()
	// A round that cannot beat leaves the status alone: what the last
	// good round admitted runs out by itself (validUntil).
	hb, err := a.readLive(ctx, false)
	if err != nil {
		return err
	}
	a.redisBound.Store(hb.bound)
	if hb.bound > 0 {
		a.scanned = false
	}
	if !a.joined && a.foreign(hb, a.opts.Store.SyncedBound()) {
		// Learn a foreign bound at once, even while another authority is
		// live: should Redis lose it before this store joins, the store's
		// floor (synced) still holds it. Before joining, Adopt only raises
		// the floor; nothing is written to Redis.
		if err := a.opts.Store.Adopt(hb.bound); err != nil {
			return fmt.Errorf("adopting the token bound in Redis: %w", err)
		}
	}
	c, liveCopy := a.classify(hb)
	if liveCopy {
		// A "predecessor" renewed its member: it is a live copy of this
		// directory, and what this store copied from it is out of date.
		a.opts.Logger.Error("a process this fence store took for its predecessor is alive: the data dir was copied from a live fenceproxy; tokens up to the bound in Redis are no longer honoured")
		if err := a.opts.Store.Adopt(max(hb.bound, a.opts.Store.SyncedBound())); err != nil {
			a.refuse(c)
			return fmt.Errorf("adopting the bound after finding a live copy of the data dir: %w", err)
		}
	}
	if c != nil {
		a.conflicted, a.cleanRounds = true, 0
		a.refuse(c)
		return nil
	}
	a.cleanRounds++
	if !a.joined {
		if a.conflicted && a.cleanRounds < 2 {
			// The other member may only be missing for a moment (its
			// master failed over): look once more before joining.
			a.refuse(nil)
			return nil
		}
		if err := a.join(ctx, hb); err != nil {
			st := &status{}
			errors.As(err, &st.shortfall)
			a.publish(st)
			return err
		}
		a.joined = true
	} else if err := a.reconcile(ctx, hb); err != nil {
		a.refuse(nil)
		return err
	}
	a.publish(&status{joined: true, validUntil: began.Add(a.validFor)})
	return nil
}

// readLive runs heartbeatScript: it writes this process's member (unless
// probe) and reads the live members and the bound. Its errors wrap
// errHeartbeat.
func (a *Authority) readLive(ctx context.Context, probe bool) (heartbeat, error) {
	node := a.opts.Backend.MasterForKey([]byte(a.liveKey))
	if node == nil {
		return heartbeat{}, fmt.Errorf("%w: %w", errHeartbeat, upstream.ErrUnavailable)
	}
	db, err := a.keysDB(ctx, node)
	if err != nil {
		return heartbeat{}, fmt.Errorf("%w: finding the database for the token authority's keys: %w", errHeartbeat, err)
	}
	reply, err := heartbeatScript.Run(ctx, node.Client, []string{a.liveKey, a.boundKey},
		a.member, a.liveFor.Milliseconds(), maxMembers, db, b2i(probe), time.Now().UnixMilli()).Slice()
	if err != nil {
		a.opts.Backend.Refresh() // in front of a cluster, the slot may have moved
		a.db.Store(-1)           // a failover may have brought a Redis with fewer databases
		return heartbeat{}, fmt.Errorf("%w: %w", errHeartbeat, err)
	}
	hb, err := parseHeartbeat(reply)
	if err != nil {
		return heartbeat{}, fmt.Errorf("%w: %w", errHeartbeat, err)
	}
	return hb, nil
}

// foreign reports whether the Redis bound says tokens may have been issued
// without this store (invariant 2): it is above the store's synced bound
// (read after it), or another store or a process other than this one and
// its dead predecessors raised it.
func (a *Authority) foreign(hb heartbeat, synced uint64) bool {
	if hb.bound > synced {
		return true
	}
	store := a.opts.Store
	return hb.bound > 0 && (hb.store != store.ID() || hb.run != store.Run() && !a.predecessor(hb.run))
}

// predecessor reports whether run is a process that opened this directory
// before and has not been seen alive since.
func (a *Authority) predecessor(run string) bool {
	return a.opts.Store.PreviousRun(run) && !a.liveRuns[run]
}

// join adopts whatever the Redis bound (or, when it is missing, the
// owner records) says was issued without this store, then joins it.
func (a *Authority) join(ctx context.Context, hb heartbeat) error {
	store := a.opts.Store
	synced := store.SyncedBound()
	var foreign uint64
	switch {
	case hb.bound == 0:
		found, err := a.scanRecords(ctx)
		if err != nil {
			return fmt.Errorf("reading the owner records' tokens (the token bound is missing in Redis): %w", err)
		}
		a.scanned = true
		if found > synced {
			foreign = found
		}
	case a.foreign(hb, synced):
		foreign = hb.bound
	}
	if foreign > 0 {
		a.opts.Logger.Warn("the token bound in Redis (or an owner record) is above this fence store's, or was written by another store: "+
			"the data dir is new, empty or restored, or another fenceproxy ran; tokens up to it are no longer honoured",
			"foreign", foreign, "local_bound", synced, "store_id", store.ID(), "written_by", hb.store)
	}
	if err := store.Join(foreign, a.shareBound); err != nil {
		return fmt.Errorf("joining the fence store to Redis's token bound: %w", err)
	}
	a.opts.Logger.Debug("token authority joined", "store_id", store.ID(), "authority_id", a.id,
		"bound", store.SyncedBound(), "floor", store.Floor())
	return nil
}

// reconcile adopts a foreign Redis bound and rewrites a lower or missing
// one.
func (a *Authority) reconcile(ctx context.Context, hb heartbeat) error {
	store := a.opts.Store
	synced := store.SyncedBound()
	if a.foreign(hb, synced) {
		a.opts.Logger.Warn("another fence store (or a copy of this one) raised the token bound in Redis while this one was not live: "+
			"tokens up to it are no longer honoured", "redis_bound", hb.bound, "local_bound", synced, "written_by", hb.store)
		if err := store.Adopt(hb.bound); err != nil {
			return fmt.Errorf("adopting the token bound in Redis: %w", err)
		}
		synced = store.SyncedBound()
	} else if hb.bound >= synced {
		return nil
	}
	if hb.bound == 0 && !a.scanned {
		// Redis lost its data (or the key was deleted): any record left
		// (a Redis Cluster's other masters) may carry a foreign token.
		found, err := a.scanRecords(ctx)
		if err == nil {
			a.scanned = true
			if found > synced {
				if err := store.Adopt(found); err != nil {
					return fmt.Errorf("adopting an owner record's token: %w", err)
				}
				synced = store.SyncedBound()
			}
		}
	}
	if _, err := a.shareBound(synced); err != nil {
		// Serving goes on: the local bound still holds every token.
		a.logError(fmt.Errorf("rewriting the token bound in Redis: %w", err))
	} else if hb.bound < synced {
		a.opts.Logger.Info("token bound rewritten in Redis", "was", hb.bound, "bound", synced)
	}
	return nil
}

// shareBound raises the Redis bound to b with a WAIT for --min-replicas,
// and returns the bound there after it (persist's Join share function).
func (a *Authority) shareBound(b uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.ReplicaTimeout+5*time.Second)
	defer cancel()
	node := a.opts.Backend.MasterForKey([]byte(a.boundKey))
	if node == nil {
		return 0, upstream.ErrUnavailable
	}
	db := a.db.Load()
	if db < 0 {
		return 0, fmt.Errorf("the token authority's database is not known yet (no heartbeat round ran)")
	}
	w := a.opts.Writer.StartOn(ctx, node, lockwriter.ScriptCall{
		Source: shareScript,
		Keys:   []string{a.boundKey},
		Args:   lockwriter.ArgsOf(strconv.FormatUint(b, 10), a.opts.Store.ID(), a.opts.Store.Run(), db),
	}, true)
	reply, err := w.Reply()
	if err != nil {
		return 0, err
	}
	got, err := toUint(reply)
	if err != nil {
		return 0, err
	}
	acked, err := w.Acks()
	if err != nil {
		return 0, err
	}
	if acked < a.opts.MinReplicas {
		return 0, &NoReplicasError{Acked: acked, Wanted: a.opts.MinReplicas, Connected: len(node.Replicas())}
	}
	a.redisBound.Store(got)
	return got, nil
}

// classify applies invariant 4 to the live members. liveCopy is set when
// a member taken for a dead predecessor has renewed since it was first
// seen, with a heartbeat sent after this process began: it is alive, on a
// copy of this directory.
//
// A renewal sent before this process began proves nothing: a predecessor
// on this directory had ended by then (this process holds the directory),
// yet a heartbeat it sent just before it died may reach Redis later (held
// in a socket or in a stalled Redis's input) and move its score. Taken for
// a live copy, it would make this process refuse lock commands, and stop
// honouring the grants it had made, for no copy at all. A live copy goes
// on renewing, and its next heartbeats are sent after this process began
// (by its clock, or within the copy's clock skew).
func (a *Authority) classify(hb heartbeat) (c *ConflictError, liveCopy bool) {
	myStore := a.memberStore
	for m, score := range hb.members {
		if m == a.member {
			continue
		}
		store, run, id, ok := splitMember(m)
		switch {
		case !ok:
			continue // not written by fenceproxy
		case id != a.id:
		case store == myStore && a.predecessor(run):
			first, seen := a.firstSeen[m]
			if !seen {
				a.firstSeen[m] = score
				continue // a dead predecessor on this directory
			}
			if first == score {
				continue
			}
			if !a.sentSinceBegan(hb, m) {
				a.firstSeen[m] = score // only a later move counts
				a.opts.Logger.Info("a heartbeat a dead predecessor sent before this process began reached Redis late; it is not a live copy",
					"member", m, "sent_ms_before_start", a.began-hb.sent[m])
				continue
			}
			a.liveRuns[run], liveCopy = true, true
		case store != myStore:
			continue // a peer of this authority (a tier)
		}
		if c == nil {
			c = &ConflictError{members: map[string]string{}}
		}
		c.members[m] = score
		if store == myStore {
			c.Copy = true
		}
		if !slices.Contains(c.Stores, store) {
			c.Stores = append(c.Stores, store)
		}
	}
	if c != nil {
		slices.Sort(c.Stores)
	}
	return c, liveCopy
}

// sentSinceBegan reports whether m's last heartbeat was sent after this
// process began, or may have been: a member whose sender wrote no time (an
// earlier fenceproxy) counts as sent since.
func (a *Authority) sentSinceBegan(hb heartbeat, m string) bool {
	sent, known := hb.sent[m]
	return !known || sent > a.began
}

// refuse publishes a status that admits no lock command: a conflict, or
// (c nil) nothing confirmed.
func (a *Authority) refuse(c *ConflictError) {
	a.publish(&status{joined: a.joined, conflict: c})
}

// publish makes st what Admit sees, and logs a conflict's start and end.
func (a *Authority) publish(st *status) {
	prev := a.status.Swap(st)
	a.publishedMu.Lock()
	close(a.published)
	a.published = make(chan struct{})
	a.publishedMu.Unlock()
	was, is := prev.conflict != nil, st.conflict != nil
	switch {
	case is && (!was || !slices.Equal(prev.conflict.Stores, st.conflict.Stores)):
		a.opts.Logger.Error("lock commands refused: "+st.conflict.Reason(), "other_stores", strings.Join(st.conflict.Stores, ","))
	case was && !is && st.joined:
		a.opts.Logger.Info("no other token authority is live on this backend: lock commands are served again")
	}
}

// logError logs a failed round, once per distinct error and then at most
// every 30 s.
func (a *Authority) logError(err error) {
	if msg := err.Error(); msg != a.lastErr || time.Since(a.lastErrAt) > 30*time.Second {
		a.lastErr, a.lastErrAt = msg, time.Now()
		a.opts.Logger.Warn("token authority: lock commands wait for a good heartbeat round", "err", err)
	}
}

func splitMember(m string) (store, run, id string, ok bool) {
	parts := strings.SplitN(m, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// parseHeartbeat reads heartbeatScript's {members with scores, bound,
// store, run, legacy members with scores, legacy bound, store, run}: the
// members of both sets, and the higher bound with who raised it.
func parseHeartbeat(reply []any) (hb heartbeat, err error) {
	if len(reply) != 9 {
		return hb, fmt.Errorf("unexpected heartbeat reply %v", reply)
	}
	hb.members, hb.sent = map[string]string{}, map[string]int64{}
	if list, _ := reply[0].([]any); list != nil {
		sent, _ := reply[8].([]any)
		for i := 0; i+1 < len(list) && i/2 < len(sent); i += 2 {
			m, _ := list[i].(string)
			if v, ok := sent[i/2].(string); ok {
				if at, err := strconv.ParseInt(v, 10, 64); err == nil {
					hb.sent[m] = at
				}
			}
		}
	}
	for _, at := range []int{0, 4} {
		list, _ := reply[at].([]any)
		for i := 0; i+1 < len(list); i += 2 {
			m, _ := list[i].(string)
			score, _ := list[i+1].(string)
			hb.members[m] = score
		}
		if reply[at+1] == nil {
			continue
		}
		bound, err := toUint(reply[at+1])
		if err != nil {
			return hb, fmt.Errorf("the token bound in Redis is not a token: %w", err)
		}
		if bound > hb.bound {
			hb.bound = bound
			hb.store, _ = reply[at+2].(string)
			hb.run, _ = reply[at+3].(string)
		}
	}
	return hb, nil
}

// keysDB is the database the authority's keys live in: in front of a
// standalone Redis its highest (databases - 1: 15 by default), so that
// what clients write and count in database 0 (DBSIZE, SCAN, KEYS,
// RANDOMKEY, INFO keyspace, FLUSHDB) is theirs alone; in front of a Redis
// Cluster, which has only database 0, database 0. It is what Redis says
// (CONFIG GET databases, or SELECT's own range when CONFIG is refused), so
// every fenceproxy in front of one Redis finds the same one whatever its
// flags: the live set detects a second authority only if both write it in
// one place. Found at the first round, and again after a round that
// failed.
func (a *Authority) keysDB(ctx context.Context, node *upstream.Node) (int64, error) {
	if db := a.db.Load(); db >= 0 {
		return db, nil
	}
	var db int64
	if !a.opts.Backend.RoutesByKey() {
		n, err := databases(ctx, node)
		if err != nil {
			return 0, err
		}
		db = n - 1
	}
	a.db.Store(db)
	return db, nil
}

// databases is how many databases the Redis of node has.
func databases(ctx context.Context, node *upstream.Node) (int64, error) {
	if got, err := node.Client.ConfigGet(ctx, "databases").Result(); err == nil {
		if n, err := strconv.ParseInt(got["databases"], 10, 64); err == nil && n >= 1 {
			return n, nil
		}
	}
	top, err := topDBScript.Run(ctx, node.Client, nil).Int64()
	if err != nil {
		return 0, err
	}
	return top + 1, nil
}

func toUint(v any) (uint64, error) {
	switch v := v.(type) {
	case string:
		return strconv.ParseUint(v, 10, 64)
	case int64:
		if v >= 0 {
			return uint64(v), nil
		}
	}
	return 0, fmt.Errorf("unexpected value %v", v)
}

// Stats is what INFO and the metrics show.
type Stats struct {
	StoreID, AuthorityID string
	RedisBound           uint64 // the bound last read from or written to Redis (0: missing)
	Floor                uint64 // the store's token floor
	DB                   int64  // the database of the authority's keys (-1: not found yet)
	Joined               bool
	Confirmed            bool     // Admit would admit a lock command now
	Others               []string // other live stores' ids while in conflict
}

// Stats returns a snapshot.
func (a *Authority) Stats() Stats {
	st := a.status.Load()
	s := Stats{
		StoreID: a.opts.Store.ID(), AuthorityID: a.id,
		RedisBound: a.redisBound.Load(), Floor: a.opts.Store.Floor(), DB: a.db.Load(),
		Joined: st.joined, Confirmed: a.Admit() == nil,
	}
	if st.conflict != nil {
		s.Others = st.conflict.Stores
	}
	return s
}

// Info is the token authority's lines of INFO's fenceproxy section.
func (a *Authority) Info() string {
	s := a.Stats()
	return fmt.Sprintf("fence_store_id:%s\r\ntoken_authority_id:%s\r\ntoken_authority_confirmed:%d\r\n"+
		"token_authority_conflict:%d\r\ntoken_authority_others:%s\r\ntoken_authority_db:%d\r\ntoken_bound_redis:%d\r\ntoken_floor:%d\r\n",
		s.StoreID, s.AuthorityID, b2i(s.Confirmed), b2i(len(s.Others) > 0), strings.Join(s.Others, ","), s.DB, s.RedisBound, s.Floor)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// globEscape quotes Redis glob metacharacters.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// scanRecords returns the largest token in any owner record on any
// master (SCAN, then the records' tokens in pipelines of one batch each).
// Records are strings ("token term ..."; see internal/locks/scripts.go)
// and, when written by an older fenceproxy, hashes with a token field:
// both are read.
func (a *Authority) scanRecords(ctx context.Context) (uint64, error) {
	pattern := globEscape(a.opts.KeyPrefix) + "{*}"
	var best uint64
	for _, n := range a.opts.Backend.Masters() {
		for _, typ := range []string{"string", "hash"} {
			found, err := scanRecordTokens(ctx, n.Client, pattern, typ)
			if err != nil {
				return 0, err
			}
			best = max(best, found)
		}
	}
	return best, nil
}

// scanRecordTokens is scanRecords on one master for the records of one
// type.
func scanRecordTokens(ctx context.Context, c *redis.Client, pattern, typ string) (uint64, error) {
	var best, cursor uint64
	for {
		keys, next, err := c.ScanType(ctx, cursor, pattern, 1000, typ).Result()
		if err != nil {
			return 0, err
		}
		if len(keys) > 0 {
			cmds := make([]*redis.StringCmd, len(keys))
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					if typ == "hash" {
						cmds[i] = p.HGet(ctx, k, "token")
					} else {
						cmds[i] = p.Get(ctx, k)
					}
				}
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				return 0, err
			}
			for _, cmd := range cmds {
				v, _ := cmd.Result()
				tok, _, _ := strings.Cut(v, " ")
				if t, err := strconv.ParseUint(tok, 10, 64); err == nil {
					best = max(best, t)
				}
			}
		}
		if next == 0 {
			return best, nil
		}
		cursor = next
	}
}

// Keys are the names of the authority's two keys under prefix (the
// lock records' --key-prefix): the live set and the bound.
func Keys(prefix string) []string {
	return []string{prefix + "{authority}:live", prefix + "{authority}:bound"}
}
