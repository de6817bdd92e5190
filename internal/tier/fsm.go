package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/fenceproxy/fenceproxy/internal/tokencache"
	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// Window is how many tokens one window entry reserves (Hi/Lo, as persist's
// ReserveWindow): one log entry per Window tokens, and a new leader skips
// at most Window tokens of its predecessor's.
const Window = 1 << 16

// maxToken is the highest token (tokenstate's): the lock scripts compare
// tokens in Lua, exactly only up to 2^53.
const maxToken = tokenstate.MaxToken

// The log's entry kinds. Each entry is one version byte (entryVersion), one
// kind byte, then the kind's fields as uvarints and length-prefixed strings.
const (
	entryVersion byte = 1

	kindLeaderStart byte = 1 // term, node, client addr, proposed tier id
	kindWindow      byte = 2 // (none): a new token window above the bound
	kindReserve     byte = 3 // resource, token, term
	kindConfirm     byte = 4 // resource, token
	kindCancel      byte = 5 // resource, token
	kindAdopt       byte = 6 // token: the floor goes above it
	kindBatch       byte = 7 // count, then that many Reserve, Confirm or Cancel ops (kind byte + fields)
)

// errBadEntry marks a log entry this version cannot read: a node of a newer
// version wrote it. Applying it is refused loudly rather than skipped.
var errBadEntry = errors.New("tier: unreadable log entry")

// entry is one decoded log entry.
type entry struct {
	kind     byte
	resource string
	token    uint64
	term     uint64
	node     string  // LeaderStart: the new leader's node id
	addr     string  // LeaderStart: the leader's client address (followers forward there)
	tierID   string  // LeaderStart: the tier id proposed, kept only by the first
	ops      []entry // Batch: its Reserve, Confirm and Cancel ops, applied in order
}

func (e *entry) encode() []byte {
	b := make([]byte, 0, 32+len(e.resource)+len(e.node)+len(e.addr)+len(e.tierID))
	b = append(b, entryVersion)
	return e.appendTo(b)
}

// appendTo appends the kind byte and the kind's fields.
func (e *entry) appendTo(b []byte) []byte {
	b = append(b, e.kind)
	switch e.kind {
	case kindLeaderStart:
		b = binary.AppendUvarint(b, e.term)
		b = appendString(b, e.node)
		b = appendString(b, e.addr)
		b = appendString(b, e.tierID)
	case kindWindow:
	case kindReserve:
		b = appendString(b, e.resource)
		b = binary.AppendUvarint(b, e.token)
		b = binary.AppendUvarint(b, e.term)
	case kindConfirm, kindCancel:
		b = appendString(b, e.resource)
		b = binary.AppendUvarint(b, e.token)
	case kindAdopt:
		b = binary.AppendUvarint(b, e.token)
	case kindBatch:
		b = binary.AppendUvarint(b, uint64(len(e.ops)))
		for i := range e.ops {
			b = e.ops[i].appendTo(b)
		}
	}
	return b
}

// maxBatchOps bounds the ops one Batch entry is read with: no more than
// the proposer ever puts in one.
const maxBatchOps = 4096

func decodeEntry(b []byte) (e entry, err error) {
	if len(b) < 2 || b[0] != entryVersion {
		return e, errBadEntry
	}
	d := decoder{b: b[1:]}
	e = d.entry(true)
	if d.bad || len(d.b) != 0 {
		return e, errBadEntry
	}
	return e, nil
}

// entry reads a kind byte and its fields; a Batch only where batch is true
// (its ops are never batches themselves).
func (d *decoder) entry(batch bool) (e entry) {
	if len(d.b) == 0 {
		d.bad = true
		return e
	}
	e.kind = d.b[0]
	d.b = d.b[1:]
	switch e.kind {
	case kindLeaderStart:
		e.term = d.uvarint()
		e.node = d.string()
		e.addr = d.string()
		e.tierID = d.string()
	case kindWindow:
	case kindReserve:
		e.resource = d.string()
		e.token = d.uvarint()
		e.term = d.uvarint()
	case kindConfirm, kindCancel:
		e.resource = d.string()
		e.token = d.uvarint()
	case kindAdopt:
		e.token = d.uvarint()
	case kindBatch:
		n := d.uvarint()
		if !batch || n > maxBatchOps {
			d.bad = true
			return e
		}
		e.ops = make([]entry, 0, n)
		for i := uint64(0); i < n && !d.bad; i++ {
			op := d.entry(false)
			switch op.kind {
			case kindReserve, kindConfirm, kindCancel:
			default:
				d.bad = true
			}
			e.ops = append(e.ops, op)
		}
	default:
		d.bad = true
	}
	return e
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads uvarints and strings; a short or malformed input sets bad.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad = true
		d.b = nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// pendingKey names one reservation.
type pendingKey struct {
	resource string
	token    uint64
}

// leaderInfo is what the last applied LeaderStart said.
type leaderInfo struct {
	term uint64
	node string
	addr string
}

// fsm is the token state every node replicates: the window bound, the
// floor, each resource's newest confirmed token, the reservations not yet
// confirmed or cancelled, the tier id and the current leader's client
// address. It lives in a local Pebble database (state.go) with the index of
// the last entry applied; memory holds the small fields, the pending
// reservations (at most the grants in flight when a leader changed) and a
// bounded cache of newest tokens, however many resources the state holds.
type fsm struct {
	db     *pebble.DB
	cache  *tokencache.Cache
	logger *slog.Logger
	closed atomic.Bool

	// Owned by raft's FSM goroutine (ApplyBatch, Restore; openFSM before
	// it starts): the state as applied, mirrored in Pebble.
	meta    stateMeta
	pending map[pendingKey]uint64 // -> the term of the leader that reserved it

	// What other goroutines read: meta and len(pending) as of the last
	// batch applied.
	mu    sync.RWMutex
	pub   fsmState
	floor atomic.Uint64 // pub.floor, for every FENCE.CHECK without mu
	// snapResources is how many resources the state held when this node
	// last wrote or restored a snapshot (counting them otherwise would
	// take a read per Confirm).
	snapResources atomic.Int64

	// onConfirmApplied, if set, is told each Confirm once the state and
	// the cache have it, so the leader's overlay can drop the entry.
	onConfirmApplied func(resource string, token uint64)
}

// openFSM opens (creating if missing) the state in dir.
func openFSM(dir string, cacheEntries int, logger *slog.Logger) (*fsm, error) {
	db, err := openStateDB(dir, logger)
	if err != nil {
		return nil, err
	}
	f := &fsm{db: db, cache: tokencache.New(cacheEntries), logger: logger}
	if f.meta, err = loadMeta(db); err == nil {
		f.pending, err = loadPending(db)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	f.publish()
	return f, nil
}

func (f *fsm) close() error {
	if f.closed.Swap(true) {
		return nil
	}
	return f.db.Close()
}

// windowStart is what Apply returns for LeaderStart and Window: the
// half-open range (from, to] of tokens the leader may now hand out.
type windowStart struct{ from, to uint64 }

// Apply applies one committed entry (raft's FSM; ApplyBatch is what raft
// calls, BatchingFSM).
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies the committed entries raft hands over at once, in
// one Pebble batch that also records the last one's index (m/applied), not
// synced: the Raft log is the durable record, and a state that lost its
// last batches in a crash is a prefix of the log that raft replays (see
// the package doc, "Restarts"). An entry at or below m/applied is skipped:
// the state already has it. LeaderStart and Window return a windowStart;
// every other entry (a Batch too) nil, and an unreadable one an error (the
// leader that proposed it sees it in its ApplyFuture). A Batch's ops go
// into the same Pebble batch as the rest, under its one index.
//
// A Pebble error here leaves the node unable to apply what every other
// node applies: it panics (fail-stop), and the restart resumes from the
// last batch that reached the disk.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	resps := make([]any, len(logs))
	a := applier{f: f, b: f.db.NewBatch(), newest: map[string]uint64{}}
	defer a.b.Close()
	for i, l := range logs {
		if l.Type != raft.LogCommand || l.Index <= f.meta.applied {
			continue
		}
		resps[i] = a.apply(l)
		f.meta.applied = l.Index
		a.any = true
	}
	if !a.any {
		return resps
	}
	var err error
	if a.metaChanged {
		err = f.meta.put(a.b)
	} else {
		err = f.meta.putApplied(a.b)
	}
	if err == nil {
		err = a.b.Commit(pebble.NoSync)
	}
	if err != nil {
		f.logger.Error("tier: writing the state failed; stopping (the restart resumes from the log)", "err", err)
		panic(fmt.Sprintf("tier: applying entries up to %d: %v", f.meta.applied, err))
	}
	// Readers see the batch only now, in this order: Pebble (committed
	// above), the cache, the small fields, then the overlay drops the
	// Confirms (Node.newest reads the overlay first). A cached entry is
	// raised; none is made (the stored value is a maximum that only a read
	// can tell: a Confirm a deposed leader sent late may be below it).
	for r, t := range a.newest {
		f.cache.Raise([]byte(r), t, false)
	}
	f.publish()
	if f.onConfirmApplied != nil {
		for _, c := range a.confirmed {
			f.onConfirmApplied(c.resource, c.token)
		}
	}
	return resps
}

// applier applies one batch of entries.
type applier struct {
	f   *fsm
	b   *pebble.Batch
	any bool // an entry was applied
	// metaChanged: an entry changed a small field other than the applied
	// index (LeaderStart, Window, Adopt).
	metaChanged bool
	newest      map[string]uint64 // resources this batch raised -> the highest token merged
	confirmed   []pendingKey
}

// apply applies one log entry: each op of a Batch in order.
func (a *applier) apply(l *raft.Log) any {
	e, err := decodeEntry(l.Data)
	if err != nil {
		return fmt.Errorf("%w at index %d", err, l.Index)
	}
	if e.kind == kindBatch {
		// Every op of a Batch goes into this same Pebble batch, with the
		// entry's index as m/applied: a Batch is applied whole or, after a
		// crash, not at all (and then replayed whole).
		for i := range e.ops {
			a.applyOp(&e.ops[i])
		}
		return nil
	}
	return a.applyOp(&e)
}

// applyOp applies one entry, or one op of a Batch (a Reserve, Confirm or
// Cancel: decodeEntry admits no other kind there).
func (a *applier) applyOp(e *entry) any {
	f := a.f
	k := pendingKey{e.resource, e.token}
	switch e.kind {
	case kindLeaderStart, kindWindow, kindAdopt:
		a.metaChanged = true
	}
	switch e.kind {
	case kindLeaderStart:
		// Fold: every reservation made before this leader may have been
		// replied by its leader, which can no longer say: count it issued.
		for k := range f.pending {
			a.raise(k.resource, k.token)
			a.check(a.b.Delete(pendingKeyBytes(k), nil))
		}
		clear(f.pending)
		if f.meta.tierID == "" {
			f.meta.tierID = e.tierID
		}
		f.meta.leader = leaderInfo{term: e.term, node: e.node, addr: e.addr}
		return a.newWindow()
	case kindWindow:
		return a.newWindow()
	case kindReserve:
		f.pending[k] = e.term
		a.check(a.b.Set(pendingKeyBytes(k), binary.AppendUvarint(nil, e.term), nil))
	case kindConfirm:
		a.dropPending(k)
		a.raise(e.resource, e.token)
		a.confirmed = append(a.confirmed, k)
	case kindCancel:
		a.dropPending(k)
	case kindAdopt:
		f.meta.floor = max(f.meta.floor, e.token)
		f.meta.bound = max(f.meta.bound, e.token)
	}
	return nil
}

func (a *applier) dropPending(k pendingKey) {
	if _, ok := a.f.pending[k]; ok {
		delete(a.f.pending, k)
		a.check(a.b.Delete(pendingKeyBytes(k), nil))
	}
}

// raise makes token resource's newest if it is above the newest now: a
// max merge, which reads nothing.
func (a *applier) raise(resource string, token uint64) {
	a.newest[resource] = max(a.newest[resource], token)
	a.check(a.b.Merge(tokenstate.TokenKey(resource), tokenstate.EncodeToken(token), nil))
}

// check fails the batch (ApplyBatch panics) on a Pebble error.
func (a *applier) check(err error) {
	if err != nil {
		a.f.logger.Error("tier: writing the state failed; stopping (the restart resumes from the log)", "err", err)
		panic(fmt.Sprintf("tier: applying entries after %d: %v", a.f.meta.applied, err))
	}
}

// newWindow reserves the next window above every bound committed.
func (a *applier) newWindow() windowStart {
	m := &a.f.meta
	from := max(m.bound, m.floor)
	to := tokenstate.NextBound(from, Window)
	m.bound = to
	return windowStart{from: from, to: to}
}

// stored is resource's newest token as the state holds it (0 if none): the
// cache, else Pebble (the merged maximum). Exact: the FSM goroutine is the
// only writer, and a cached entry is raised after every write
// (tokencache).
func (f *fsm) stored(resource string) (uint64, error) {
	key := []byte(resource)
	t, epoch, ok := f.cache.Get(key)
	if ok {
		return t, nil
	}
	if f.closed.Load() {
		return 0, ErrClosed
	}
	v, closer, err := f.db.Get(tokenstate.TokenKey(resource))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		t = 0
	case err != nil:
		return 0, fmt.Errorf("tier: reading the state: %w", err)
	default:
		t = decodeUint(v)
		closer.Close()
	}
	f.cache.Fill(key, t, epoch)
	return t, nil
}

// newestOf is resource's newest confirmed token, or the floor if higher.
func (f *fsm) newestOf(resource string) (uint64, error) {
	t, err := f.stored(resource)
	return tokenstate.Newest(t, f.floor.Load()), err
}

// newestCached is newestOf when the cache has the resource, without I/O.
func (f *fsm) newestCached(resource string) (uint64, bool) {
	t, _, ok := f.cache.Get([]byte(resource))
	return tokenstate.Newest(t, f.floor.Load()), ok
}

func (f *fsm) floorNow() uint64 { return f.floor.Load() }

// fsmState is a copy of the small fields, for INFO and the leader.
type fsmState struct {
	applied      uint64
	bound, floor uint64
	tierID       string
	leader       leaderInfo
	pending      int
}

// publish makes meta what readers see. On the FSM goroutine.
func (f *fsm) publish() {
	m := f.meta
	f.mu.Lock()
	f.pub = fsmState{applied: m.applied, bound: m.bound, floor: m.floor, tierID: m.tierID, leader: m.leader,
		pending: len(f.pending)}
	f.mu.Unlock()
	f.floor.Store(m.floor)
}

func (f *fsm) state() fsmState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.pub
}
