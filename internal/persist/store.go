package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fenceproxy/fenceproxy/internal/tokencache"
	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

const (
	// MaxResourceLen is the longest resource the store accepts, in bytes
	// (tokenstate's).
	MaxResourceLen = tokenstate.MaxResourceLen
	// MaxToken is the largest token ever issued, 2^53 (tokenstate's: the
	// lock scripts' exact Lua numbers).
	MaxToken = tokenstate.MaxToken

	defaultCacheEntries  = 1 << 18
	defaultReserveWindow = 1 << 20
)

// Options configures a Store. The zero value is usable.
type Options struct {
	// CacheEntries bounds the in-memory newest-token cache (LRU). Default 262144.
	CacheEntries int
	// ReserveWindow is how many tokens one durable reservation covers. Default
	// 1<<20; at most MaxToken.
	ReserveWindow uint64
	// FS lets tests use vfs.NewCrashableMem(); nil means the real disk (vfs.Default).
	FS vfs.FS
	// ObserveSync, if set, is called with the duration of every synced Pebble
	// commit (for an fsync-latency histogram). It must be cheap and safe for
	// concurrent use.
	ObserveSync func(time.Duration)
	// Logger receives Pebble's messages and the store's own; nil discards them.
	Logger *slog.Logger
	// Shared says the store's bound is also kept on a backend (Redis): Open
	// then reserves nothing, and no token is issued until Join has written
	// a window's bound there too (see shared.go).
	Shared bool
	// TokenFloor: no token at or below it is ever issued, nor judged
	// current (an operator's --token-floor, after restoring a backup). It
	// raises the persisted floor; a smaller value than the floor is a no-op.
	TokenFloor uint64
}

// Grant is one (resource, token) pair for Confirm.
type Grant struct {
	Resource []byte
	Token    uint64
	// AboveAll says the caller knows Token exceeds every token recorded for
	// Resource before: it read Newest since its last Confirm of Resource and
	// serializes its grants per resource (the lock manager does both). The
	// stored value is then exactly Token, and the cache learns it without a
	// read. Leave it false when unsure: the cache then only raises entries
	// it already has.
	AboveAll bool
}

// Stats is a snapshot for metrics and INFO.
type Stats struct {
	CacheEntries  int    // entries in the newest-token cache
	CacheHits     uint64 // Newest calls answered from the cache
	CacheMisses   uint64 // Newest calls that read Pebble
	ReservedBound uint64 // bound of the tokens NextToken may return now (synced, and shared if Options.Shared)
	SyncedBound   uint64 // m/bound as last synced; above ReservedBound while a reservation is being shared
	Floor         uint64 // the token floor (invariant 8): no token at or below it is issued or current
	LastIssued    uint64 // greatest token that may have been returned by NextToken
	SyncedCommits uint64 // pebble.Sync commits made (group commits of Reserves, bound reservations); fsyncs may be fewer
	Healthy       bool   // false after a failed sync (invariant 6)
}

// Store is the fence store. See the package doc for its invariants.
type Store struct {
	opts  Options
	log   *slog.Logger
	db    *pebble.DB
	lock  *pebble.Lock
	cache *tokencache.Cache

	last   atomic.Uint64 // last token taken from the counter (may pass bound transiently)
	bound  atomic.Uint64 // published bound: synced as m/bound, and shared if Shared
	synced atomic.Uint64 // m/bound as last synced (>= bound)
	floor  atomic.Uint64 // published floor: synced as m/floor (invariant 8)

	reserveMu sync.Mutex // serializes bound reservations (NextToken's slow path)
	// Guarded by reserveMu:
	floorNext uint64                       // the floor the next reservation writes
	share     func(uint64) (uint64, error) // set by Join when Shared
	joined    bool                         // Join succeeded (always true unless Shared)

	id     string // the store's id (m/id), made with the directory
	run    string // this process's run id
	runs   string // m/run: the last keptRuns run ids on this directory, this one first
	dirID  string // the directory's inode (m/dir), "" if unknown
	copied bool   // m/dir named another inode: a copied or restored directory

	commits  committer // the group commit of Reserves (commit.go)
	deferred deferred  // confirmations for the next group's batch (reserve.go)

	syncs  atomic.Uint64
	broken atomic.Pointer[error] // set once by fail
	closed atomic.Bool
}

// Open opens (creating if missing) the store in dir. It reloads the persisted
// token bound and durably reserves a new window above it BEFORE returning, so
// every token NextToken returns after Open is greater than every token any
// earlier process could have returned. It returns a clear error if the dir
// cannot be created, locked (ErrLocked: another fenceproxy holds it) or opened.
func Open(dir string, opts Options) (*Store, error) {
	if opts.CacheEntries <= 0 {
		opts.CacheEntries = defaultCacheEntries
	}
	if opts.ReserveWindow == 0 {
		opts.ReserveWindow = defaultReserveWindow
	}
	// Within the token space: a wider window would underflow the bound
	// arithmetic (tokenstate.NextBound).
	opts.ReserveWindow = min(opts.ReserveWindow, MaxToken)
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{opts: opts, log: opts.Logger, cache: tokencache.New(opts.CacheEntries)}

	// Create the directory ourselves (syncing every new parent, as Pebble
	// would) so that we can take the lock first and name that failure.
	if err := mkdirAllSynced(opts.FS, dir); err != nil {
		if denied(err) {
			return nil, notWritable(opts.FS, dir, err)
		}
		return nil, fmt.Errorf("persist: create data dir %q: %w", dir, err)
	}
	lock, err := pebble.LockDirectory(dir, opts.FS)
	if err != nil {
		if denied(err) {
			// Opening the LOCK file failed before any lock was tried:
			// the directory is not this process's to write (Docker's
			// root-owned volume and a non-root user), not in use.
			return nil, notWritable(opts.FS, dir, err)
		}
		return nil, fmt.Errorf("%w: %q: %v", ErrLocked, dir, err)
	}
	popts := tokenstate.PebbleOptions()
	popts.FS, popts.Lock, popts.Logger = opts.FS, lock, pebbleLogger{s}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("persist: open pebble in %q: %w", dir, err)
	}
	s.db, s.lock = db, lock

	folded, err := s.foldReservations()
	if err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("persist: recover reservations in %q: %w", dir, err)
	}
	if folded > 0 {
		s.log.Info("fence store: tokens reserved before a crash now count as issued", "resources", folded)
	}
	prev, err := s.loadMeta(dir)
	if err == nil {
		s.reserveMu.Lock()
		if opts.Shared {
			// Nothing is issued before Join; a raised floor is kept now.
			err = s.syncMetaLocked()
		} else {
			s.joined = true
			err = s.reserveLocked(max(prev, s.floorNext))
		}
		s.reserveMu.Unlock()
	}
	if err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("persist: reserve tokens in %q: %w", dir, err)
	}
	s.log.Debug("fence store open", "dir", dir, "id", s.id, "previous_bound", prev, "bound", s.bound.Load(), "floor", s.floor.Load())
	return s, nil
}

// Close closes Pebble and releases the directory lock. It must not run
// concurrently with other methods.
func (s *Store) Close() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if s.usable() == nil {
		if err := s.flushDeferred(); err != nil {
			s.log.Warn("fence store: confirmations not written at close; their reservations count at the next open", "err", err)
		}
	}
	if s.closed.Swap(true) {
		return ErrClosed
	}
	err := s.db.Close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("persist: close: %w", err)
	}
	return nil
}

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() Stats {
	cs := s.cache.Stats()
	st := Stats{CacheEntries: cs.Entries, CacheHits: cs.Hits, CacheMisses: cs.Misses}
	st.ReservedBound = s.bound.Load()
	st.SyncedBound = s.synced.Load()
	st.Floor = s.floor.Load()
	st.LastIssued = min(s.last.Load(), st.ReservedBound)
	st.SyncedCommits = s.syncs.Load()
	st.Healthy = s.broken.Load() == nil
	return st
}

// usable returns nil if the store may serve a call.
func (s *Store) usable() error {
	if p := s.broken.Load(); p != nil {
		return *p
	}
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// fail makes the store refuse every later call (invariant 6). The first cause wins.
func (s *Store) fail(cause error) error {
	err := fmt.Errorf("%w: %w", ErrUnhealthy, cause)
	if s.broken.CompareAndSwap(nil, &err) {
		s.log.Error("fence store is now unhealthy; restart fenceproxy", "err", cause)
	}
	return *s.broken.Load()
}

// commitSync applies b with pebble.Sync and reports the outcome under
// invariant 6: Pebble reports a failed commit through Logger.Fatalf (see
// pebbleLogger), so after Apply returns we must also check s.broken. A
// concurrent healthy commit may see the failure too and report it: an error
// from commitSync means "outcome unknown", never "certainly not written".
func (s *Store) commitSync(b *pebble.Batch) error {
	start := time.Now()
	err := s.db.Apply(b, pebble.Sync)
	if s.opts.ObserveSync != nil {
		s.opts.ObserveSync(time.Since(start))
	}
	s.syncs.Add(1)
	if err != nil {
		return s.fail(err)
	}
	if p := s.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// get reads one 8-byte value; a missing key reads as 0.
func (s *Store) get(key []byte) (uint64, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("persist: read %q: %w", key, err)
	}
	defer closer.Close()
	return tokenstate.DecodeToken(v)
}

// pebbleLogger routes Pebble's log to slog. Pebble calls Fatalf when a
// commit fails (db.go: "pebble: fatal commit error") and then carries on; the
// default logger would exit the process. We turn it into invariant 6 instead.
type pebbleLogger struct{ s *Store }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.s.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.s.log.Warn(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	f := fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			f.errs = append(f.errs, err) // keep the cause for errors.Is
		}
	}
	l.s.fail(f)
}

type fatalError struct {
	msg  string
	errs []error
}

func (f fatalError) Error() string   { return f.msg }
func (f fatalError) Unwrap() []error { return f.errs }

// mkdirAllSynced creates dir and any missing parents, then syncs the parent
// of each directory it created so the new entries survive a crash.
func mkdirAllSynced(fs vfs.FS, dir string) error {
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	var parents []string
	for p := fs.PathDir(dir); ; p = fs.PathDir(p) {
		parents = append(parents, p)
		if _, err := fs.Stat(p); err == nil || fs.PathDir(p) == p {
			break
		}
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range parents {
		d, err := fs.OpenDir(p)
		if err != nil {
			return err
		}
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// denied reports whether err is the file system refusing this process a
// write: permissions, or a read-only file system.
func denied(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// notWritable says which user may not write where, and what to do.
func notWritable(fsys vfs.FS, dir string, err error) error {
	if errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("%w: %s is on a read-only file system: %v; give --data-dir a writable directory", ErrNotWritable, dir, err)
	}
	owner := ""
	if o := dirOwner(fsys, dir); o != "" {
		owner = " (" + o + ")"
	}
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err // "permission denied", without the path said already
	}
	return fmt.Errorf("%w by uid %d: %s%s: %v; chown it to the user fenceproxy runs as (or give --data-dir a directory that user owns)",
		ErrNotWritable, os.Getuid(), dir, owner, cause)
}
