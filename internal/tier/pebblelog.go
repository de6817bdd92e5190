package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// pebbleStore is a raft LogStore and StableStore on Pebble (Options.LogStore
// "pebble"): every StoreLogs and Set is one synced batch, so one WAL fsync
// (bbolt's commit takes two: its pages, then its meta page), and Pebble
// group-commits concurrent syncs.
//
//	l<index, 8 bytes big-endian>  a log entry (encodeLog)
//	s<key>                        a stable-store value
type pebbleStore struct {
	db *pebble.DB
	// mu and closed keep raft off a closed Pebble (which panics): raft's
	// transport may still be serving an RPC that began before the node
	// shut down when closeStores runs.
	mu     sync.RWMutex
	closed bool
}

// errStoreClosed fails a log store operation after Close.
var errStoreClosed = errors.New("tier: the raft store is closed (the node is stopping)")

// open holds the store open for one operation and reports whether it is;
// the caller runs p.mu.RUnlock after, only if it was.
func (p *pebbleStore) open() bool {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return false
	}
	return true
}

// closedStableWrite is a stable store write after Close: it never
// returns. raft panics on a failed stable write (setCurrentTerm), and a
// success would let the RPC under way answer for what is not on disk; the
// node is stopping, and the RPC's goroutine waits for the process to end.
func closedStableWrite() { select {} }

func openPebbleStore(dir string, logger *slog.Logger) (*pebbleStore, error) {
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: pebbleLogger{logger}})
	if err != nil {
		return nil, err
	}
	return &pebbleStore{db: db}, nil
}

func (p *pebbleStore) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.db.Close()
}

func logKey(i uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'l'
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

var logLower, logUpper = []byte("l"), []byte("m")

func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 32+len(l.Data)+len(l.Extensions))
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	b = binary.AppendVarint(b, l.AppendedAt.UnixNano())
	b = appendString(b, string(l.Data))
	return appendString(b, string(l.Extensions))
}

func decodeLog(index uint64, b []byte, l *raft.Log) error {
	d := decoder{b: b}
	l.Index = index
	l.Term = d.uvarint()
	if len(d.b) == 0 {
		return errors.New("tier: short log entry")
	}
	l.Type = raft.LogType(d.b[0])
	d.b = d.b[1:]
	ns, n := binary.Varint(d.b)
	if n <= 0 {
		return errors.New("tier: bad log entry time")
	}
	d.b = d.b[n:]
	l.AppendedAt = time.Unix(0, ns)
	if data := d.string(); len(data) > 0 {
		l.Data = []byte(data)
	} else {
		l.Data = nil
	}
	if ext := d.string(); len(ext) > 0 {
		l.Extensions = []byte(ext)
	} else {
		l.Extensions = nil
	}
	if d.bad {
		return fmt.Errorf("tier: corrupt log entry %d", index)
	}
	return nil
}

func (p *pebbleStore) edge(first bool) (uint64, error) {
	if !p.open() {
		return 0, errStoreClosed
	}
	defer p.mu.RUnlock()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: logLower, UpperBound: logUpper})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	ok := false
	if first {
		ok = it.First()
	} else {
		ok = it.Last()
	}
	if !ok {
		return 0, it.Error()
	}
	return binary.BigEndian.Uint64(it.Key()[1:]), nil
}

func (p *pebbleStore) FirstIndex() (uint64, error) { return p.edge(true) }
func (p *pebbleStore) LastIndex() (uint64, error)  { return p.edge(false) }

func (p *pebbleStore) GetLog(index uint64, l *raft.Log) error {
	if !p.open() {
		return errStoreClosed
	}
	defer p.mu.RUnlock()
	v, closer, err := p.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	return decodeLog(index, v, l)
}

func (p *pebbleStore) StoreLog(l *raft.Log) error { return p.StoreLogs([]*raft.Log{l}) }

func (p *pebbleStore) StoreLogs(ls []*raft.Log) error {
	if !p.open() {
		return errStoreClosed
	}
	defer p.mu.RUnlock()
	b := p.db.NewBatch()
	defer b.Close()
	for _, l := range ls {
		if err := b.Set(logKey(l.Index), encodeLog(l), nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

func (p *pebbleStore) DeleteRange(min, max uint64) error {
	if !p.open() {
		return errStoreClosed
	}
	defer p.mu.RUnlock()
	return p.db.DeleteRange(logKey(min), logKey(max+1), pebble.Sync)
}

func stableKey(k []byte) []byte { return append([]byte("s"), k...) }

func (p *pebbleStore) Set(k, v []byte) error {
	if !p.open() {
		closedStableWrite()
	}
	defer p.mu.RUnlock()
	return p.db.Set(stableKey(k), v, pebble.Sync)
}

func (p *pebbleStore) Get(k []byte) ([]byte, error) {
	if !p.open() {
		return nil, errStoreClosed
	}
	defer p.mu.RUnlock()
	v, closer, err := p.db.Get(stableKey(k))
	if errors.Is(err, pebble.ErrNotFound) {
		// raft-boltdb's message, which raft expects of a missing key.
		return nil, errors.New("not found")
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

func (p *pebbleStore) SetUint64(k []byte, v uint64) error {
	return p.Set(k, binary.BigEndian.AppendUint64(nil, v))
}

func (p *pebbleStore) GetUint64(k []byte) (uint64, error) {
	v, err := p.Get(k)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("tier: stable value %q is %d bytes", k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// pebbleLogger keeps Pebble's routine messages (WAL replay at every open)
// out of the log; its errors go to the node's logger.
type pebbleLogger struct{ l *slog.Logger }

func (pebbleLogger) Infof(string, ...any) {}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("tier: raft log store: " + fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error("tier: raft log store: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}
