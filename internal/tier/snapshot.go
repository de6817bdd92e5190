package tier

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// Snapshots stream: Persist reads a Pebble snapshot of the state and
// writes it record by record; Restore reads records and writes them in
// batches. Neither holds the state in memory.
//
//	snapshotMagic
//	applied, bound, floor              uvarints (the m/ keys)
//	tier id, leader term, node, addr   string, uvarint, string, string
//	't' resource token                 one per t/ key
//	'p' resource token term            one per p/ key
//	'e'                                the end
//
// Strings are a uvarint length and the bytes. A snapshot carries the index
// of the last entry its state applied, so a Restore that finds the state
// already there (a restart: raft restores its last snapshot at every
// start) keeps the state and reads no further.
var (
	snapshotMagic   = []byte("fenceproxy-tier-snapshot/2\n")
	snapshotMagicV1 = []byte("fenceproxy-tier-snapshot/1\n") // the state in memory, read for an upgrade
)

const (
	recToken   byte = 't'
	recPending byte = 'p'
	recEnd     byte = 'e'
)

// restoreBatchBytes is how much a restore writes per Pebble batch.
const restoreBatchBytes = 1 << 20

// Snapshot captures the state as of the last batch applied: a Pebble
// snapshot (cheap; Apply goes on while Persist reads it).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if f.closed.Load() {
		return nil, ErrClosed
	}
	return &snapshot{f: f, snap: f.db.NewSnapshot()}, nil
}

type snapshot struct {
	f    *fsm
	snap *pebble.Snapshot
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.persist(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) persist(sink io.Writer) error {
	// Sync the state's log first: raft keeps this snapshot and may drop the
	// log before it, so the state on disk must be at least as new, or a
	// restart would need the whole snapshot restored (a crash between two
	// unsynced batches loses their tail; never more than the log holds).
	if err := s.f.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("tier: syncing the state before a snapshot: %w", err)
	}
	m, err := loadMeta(s.snap)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(sink, 1<<16)
	b := append([]byte(nil), snapshotMagic...)
	for _, v := range []uint64{m.applied, m.bound, m.floor} {
		b = binary.AppendUvarint(b, v)
	}
	b = appendString(b, m.tierID)
	b = binary.AppendUvarint(b, m.leader.term)
	b = appendString(b, m.leader.node)
	b = appendString(b, m.leader.addr)
	if _, err := w.Write(b); err != nil {
		return err
	}
	var resources int64
	for _, fam := range []struct {
		prefix []byte
		record func(b, key, value []byte) ([]byte, error)
	}{
		{tokenstate.TokenPrefix, func(b, k, v []byte) ([]byte, error) {
			resources++
			b = append(b, recToken)
			b = appendString(b, string(k[len(tokenstate.TokenPrefix):]))
			return binary.AppendUvarint(b, decodeUint(v)), nil
		}},
		{tokenstate.ReservedPrefix, func(b, k, v []byte) ([]byte, error) {
			p, ok := parsePendingKey(k)
			term, n := binary.Uvarint(v)
			if !ok || n <= 0 {
				return b, fmt.Errorf("tier: unreadable reservation %q in the state", k)
			}
			b = append(b, recPending)
			b = appendString(b, p.resource)
			b = binary.AppendUvarint(b, p.token)
			return binary.AppendUvarint(b, term), nil
		}},
	} {
		it, err := s.snap.NewIter(&pebble.IterOptions{LowerBound: fam.prefix, UpperBound: tokenstate.PrefixUpper(fam.prefix)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok && err == nil; ok = it.Next() {
			if b, err = fam.record(b[:0], it.Key(), it.Value()); err == nil {
				_, err = w.Write(b)
			}
		}
		if err == nil {
			err = it.Error()
		}
		it.Close()
		if err != nil {
			return err
		}
	}
	if err := w.WriteByte(recEnd); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	s.f.snapResources.Store(resources)
	return nil
}

func (s *snapshot) Release() { s.snap.Close() }

// Restore makes the state a snapshot's, unless the state has already
// applied every entry the snapshot holds (then it is kept as it is). The
// state is wiped first (one range deletion, which also drops m/applied, so
// a crash in the middle leaves a state that the next start restores
// again), written in batches, and synced once at the end with its applied
// index: raft drops the log the snapshot covers once Restore returns.
// raft calls it on its FSM goroutine (or before it starts), never beside
// ApplyBatch.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReaderSize(rc, 1<<16)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(r, magic); err != nil {
		return fmt.Errorf("tier: reading a snapshot: %w", err)
	}
	rd := snapReader{r: r}
	var m stateMeta
	v1 := string(magic) == string(snapshotMagicV1)
	switch {
	case v1:
		// No applied index: always restored, and the state then counts as
		// having applied nothing (raft replays every entry after it).
		m.bound, m.floor = rd.uvarint(), rd.uvarint()
	case string(magic) == string(snapshotMagic):
		m.applied, m.bound, m.floor = rd.uvarint(), rd.uvarint(), rd.uvarint()
	default:
		return errors.New("tier: not a snapshot of this version")
	}
	m.tierID = rd.string()
	m.leader = leaderInfo{term: rd.uvarint(), node: rd.string(), addr: rd.string()}
	if rd.err != nil {
		return fmt.Errorf("tier: reading a snapshot: %w", rd.err)
	}
	if !v1 && m.applied <= f.meta.applied {
		f.logger.Info("tier: the state already holds the snapshot; kept", "state_applied", f.meta.applied, "snapshot_applied", m.applied)
		return nil
	}

	b := f.db.NewBatch()
	defer func() { b.Close() }()
	err := b.DeleteRange(keysLower, keysUpper, nil)
	pending := map[pendingKey]uint64{}
	var resources int64
	put := func(key, value []byte) error {
		if err := b.Set(key, value, nil); err != nil {
			return err
		}
		if b.Len() < restoreBatchBytes {
			return nil
		}
		err := b.Commit(pebble.NoSync)
		b.Close()
		b = f.db.NewBatch()
		return err
	}
	switch {
	case err != nil:
	case v1:
		err = readV1Records(&rd, &resources, pending, put)
	default:
		err = readRecords(&rd, &resources, pending, put)
	}
	if err == nil {
		err = m.put(b)
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	// Whatever happened, the old state is gone from Pebble: what the cache
	// and memory held no longer stands.
	f.cache.Clear()
	if err != nil {
		// The state may be half written: applying on top of it would
		// diverge from every other node. Stop (fail-stop, as ApplyBatch);
		// m/applied is gone with the range deletion if any batch reached
		// the disk, so the next start restores again.
		f.logger.Error("tier: restoring a snapshot failed; stopping (the restart restores it again)", "err", err)
		panic(fmt.Sprintf("tier: restoring a snapshot: %v", err))
	}
	f.meta, f.pending = m, pending
	f.publish()
	f.snapResources.Store(resources)
	f.logger.Info("tier: state restored from a snapshot", "applied", m.applied, "resources", resources, "pending", len(pending))
	return nil
}

// readRecords reads a snapshot's records (version 2) up to its end.
func readRecords(rd *snapReader, resources *int64, pending map[pendingKey]uint64, put func(k, v []byte) error) error {
	for rd.err == nil {
		kind, err := rd.r.ReadByte()
		if err != nil {
			return err
		}
		switch kind {
		case recEnd:
			return nil
		case recToken:
			res, tok := rd.string(), rd.uvarint()
			if rd.err == nil {
				*resources++
				rd.err = put(tokenstate.TokenKey(res), tokenstate.EncodeToken(tok))
			}
		case recPending:
			k := pendingKey{resource: rd.string(), token: rd.uvarint()}
			term := rd.uvarint()
			if rd.err == nil {
				pending[k] = term
				rd.err = put(pendingKeyBytes(k), binary.AppendUvarint(nil, term))
			}
		default:
			return fmt.Errorf("unknown record %q", kind)
		}
	}
	return rd.err
}

// readV1Records reads a version 1 snapshot's counted lists.
func readV1Records(rd *snapReader, resources *int64, pending map[pendingKey]uint64, put func(k, v []byte) error) error {
	n := rd.uvarint()
	for i := uint64(0); i < n && rd.err == nil; i++ {
		res, tok := rd.string(), rd.uvarint()
		if rd.err == nil {
			*resources++
			rd.err = put(tokenstate.TokenKey(res), tokenstate.EncodeToken(tok))
		}
	}
	n = rd.uvarint()
	for i := uint64(0); i < n && rd.err == nil; i++ {
		k := pendingKey{resource: rd.string(), token: rd.uvarint()}
		term := rd.uvarint()
		if rd.err == nil {
			pending[k] = term
			rd.err = put(pendingKeyBytes(k), binary.AppendUvarint(nil, term))
		}
	}
	return rd.err
}

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
