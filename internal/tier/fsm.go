package tier

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/fenceproxy/fenceproxy/internal/persist"
)

// Window is how many tokens one window entry reserves (Hi/Lo, as persist's
// ReserveWindow): one log entry per Window tokens, and a new leader skips
// at most Window tokens of its predecessor's.
const Window = 1 << 16

// maxToken is the highest token, persist's: the lock scripts compare
// tokens in Lua, exactly only up to 2^53.
const maxToken = persist.MaxToken

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
// address. It is kept in memory and written whole to a snapshot.
type fsm struct {
	mu      sync.RWMutex
	bound   uint64 // every token ever handed out is <= bound
	floor   uint64 // every token at or below it is stale (persist's invariant 8)
	newest  map[string]uint64
	pending map[pendingKey]uint64 // -> the term of the leader that reserved it
	tierID  string
	leader  leaderInfo

	// onConfirmApplied, if set, is told each Confirm as it is applied, so
	// the leader's overlay can drop entries the state now has.
	onConfirmApplied func(resource string, token uint64)
}

func newFSM() *fsm {
	return &fsm{newest: map[string]uint64{}, pending: map[pendingKey]uint64{}}
}

// windowStart is what Apply returns for LeaderStart and Window: the
// half-open range (from, to] of tokens the leader may now hand out.
type windowStart struct{ from, to uint64 }

// Apply applies one committed entry. LeaderStart and Window return a
// windowStart; every other entry returns nil, and an unreadable one an
// error (the leader that proposed it sees it in its ApplyFuture).
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	e, err := decodeEntry(l.Data)
	if err != nil {
		return fmt.Errorf("%w at index %d", err, l.Index)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.kind == kindBatch {
		for i := range e.ops {
			f.applyLocked(&e.ops[i])
		}
		return nil
	}
	return f.applyLocked(&e)
}

// applyLocked applies one entry, or one op of a Batch.
func (f *fsm) applyLocked(e *entry) any {
	switch e.kind {
	case kindLeaderStart:
		// Fold: every reservation made before this leader may have been
		// replied by its leader, which can no longer say: count it issued.
		for k := range f.pending {
			f.raiseNewestLocked(k.resource, k.token)
		}
		clear(f.pending)
		if f.tierID == "" {
			f.tierID = e.tierID
		}
		f.leader = leaderInfo{term: e.term, node: e.node, addr: e.addr}
		return f.newWindowLocked()
	case kindWindow:
		return f.newWindowLocked()
	case kindReserve:
		f.pending[pendingKey{e.resource, e.token}] = e.term
	case kindConfirm:
		delete(f.pending, pendingKey{e.resource, e.token})
		f.raiseNewestLocked(e.resource, e.token)
		if f.onConfirmApplied != nil {
			f.onConfirmApplied(e.resource, e.token)
		}
	case kindCancel:
		delete(f.pending, pendingKey{e.resource, e.token})
	case kindAdopt:
		f.floor = max(f.floor, e.token)
		f.bound = max(f.bound, e.token)
	}
	return nil
}

func (f *fsm) raiseNewestLocked(resource string, token uint64) {
	if token > f.newest[resource] {
		f.newest[resource] = token
	}
}

// newWindowLocked reserves the next window above every bound committed.
func (f *fsm) newWindowLocked() windowStart {
	from := max(f.bound, f.floor)
	to := min(from+Window, maxToken)
	f.bound = to
	return windowStart{from: from, to: to}
}

// newestOf is resource's newest confirmed token, or the floor if higher.
func (f *fsm) newestOf(resource string) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return max(f.newest[resource], f.floor)
}

func (f *fsm) floorNow() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.floor
}

// state is a copy of the small fields, for INFO and the leader.
type fsmState struct {
	bound, floor       uint64
	tierID             string
	leader             leaderInfo
	resources, pending int
}

func (f *fsm) state() fsmState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return fsmState{bound: f.bound, floor: f.floor, tierID: f.tierID, leader: f.leader,
		resources: len(f.newest), pending: len(f.pending)}
}

// Snapshot copies the state under the lock; Persist writes the copy.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := &snapshot{bound: f.bound, floor: f.floor, tierID: f.tierID, leader: f.leader,
		newest: make(map[string]uint64, len(f.newest)), pending: make(map[pendingKey]uint64, len(f.pending))}
	for r, t := range f.newest {
		s.newest[r] = t
	}
	for k, t := range f.pending {
		s.pending[k] = t
	}
	return s, nil
}

// snapshotMagic starts every snapshot, with its version.
var snapshotMagic = []byte("fenceproxy-tier-snapshot/1\n")

// Restore replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReader(rc)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != string(snapshotMagic) {
		return errors.New("tier: not a snapshot of this version")
	}
	rd := snapReader{r: r}
	bound, floor := rd.uvarint(), rd.uvarint()
	tierID := rd.string()
	leader := leaderInfo{term: rd.uvarint(), node: rd.string(), addr: rd.string()}
	n := rd.uvarint()
	newest := make(map[string]uint64, min(n, 1<<20))
	for i := uint64(0); i < n && rd.err == nil; i++ {
		res := rd.string()
		newest[res] = rd.uvarint()
	}
	n = rd.uvarint()
	pending := make(map[pendingKey]uint64, min(n, 1<<20))
	for i := uint64(0); i < n && rd.err == nil; i++ {
		res := rd.string()
		tok := rd.uvarint()
		pending[pendingKey{res, tok}] = rd.uvarint()
	}
	if rd.err != nil {
		return fmt.Errorf("tier: reading snapshot: %w", rd.err)
	}
	f.mu.Lock()
	f.bound, f.floor, f.tierID, f.leader, f.newest, f.pending = bound, floor, tierID, leader, newest, pending
	f.mu.Unlock()
	return nil
}

type snapshot struct {
	bound, floor uint64
	tierID       string
	leader       leaderInfo
	newest       map[string]uint64
	pending      map[pendingKey]uint64
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 1<<16)
	var b []byte
	flush := func() error {
		_, err := w.Write(b)
		b = b[:0]
		return err
	}
	b = append(b, snapshotMagic...)
	b = binary.AppendUvarint(b, s.bound)
	b = binary.AppendUvarint(b, s.floor)
	b = appendString(b, s.tierID)
	b = binary.AppendUvarint(b, s.leader.term)
	b = appendString(b, s.leader.node)
	b = appendString(b, s.leader.addr)
	b = binary.AppendUvarint(b, uint64(len(s.newest)))
	err := flush()
	for r, t := range s.newest {
		if err != nil {
			break
		}
		b = appendString(b, r)
		b = binary.AppendUvarint(b, t)
		err = flush()
	}
	if err == nil {
		b = binary.AppendUvarint(b, uint64(len(s.pending)))
		err = flush()
	}
	for k, t := range s.pending {
		if err != nil {
			break
		}
		b = appendString(b, k.resource)
		b = binary.AppendUvarint(b, k.token)
		b = binary.AppendUvarint(b, t)
		err = flush()
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// snapReader reads a snapshot's uvarints and strings, keeping the first error.
type snapReader struct {
	r   *bufio.Reader
	err error
}

func (s *snapReader) uvarint() uint64 {
	if s.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(s.r)
	s.err = err
	return v
}

func (s *snapReader) string() string {
	n := s.uvarint()
	if s.err != nil {
		return ""
	}
	if n > 1<<20 {
		s.err = errors.New("string too long")
		return ""
	}
	b := make([]byte, n)
	_, s.err = io.ReadFull(s.r, b)
	return string(b)
}
