package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// The state machine's Pebble database (Options.Dir/state), beside the Raft
// log store. Its keys are internal/tokenstate's schema (the tier's m/ keys:
// m/applied, m/bound, m/floor, m/tier, m/leader; t/<resource>, max-merged;
// p/<token><resource> whose value is the uvarint term of the leader that
// reserved it).
var (
	// Every key sorts between these (a restore deletes the range).
	keysLower, keysUpper = []byte{0}, []byte{0xff}
)

func pendingKeyBytes(p pendingKey) []byte { return tokenstate.ReservedKey(p.resource, p.token) }

func parsePendingKey(k []byte) (pendingKey, bool) {
	token, resource, ok := tokenstate.ParseReservedKey(k)
	return pendingKey{token: token, resource: string(resource)}, ok
}

func openStateDB(dir string, logger *slog.Logger) (*pebble.DB, error) {
	// A token is merged into t/<resource> (tokenstate.MaxMerger: the value is
	// the maximum of every token written), so applying a Confirm or a fold
	// reads nothing: a read per Confirm (to take the maximum, and to count
	// new resources) was 11% of a leader's CPU on lock cycles.
	opts := tokenstate.PebbleOptions()
	opts.Logger = pebbleLogger{logger}
	return pebble.Open(dir, opts)
}

// stateMeta is the state's small fields: the m/ keys.
type stateMeta struct {
	applied      uint64
	bound, floor uint64
	tierID       string
	leader       leaderInfo
}

// put writes every m/ key; putApplied m/applied alone (a batch that
// changed nothing else: each key is a memtable insert).
func (m *stateMeta) put(b *pebble.Batch) error {
	return errors.Join(
		m.putApplied(b),
		b.Set(tokenstate.BoundKey, tokenstate.EncodeToken(m.bound), nil),
		b.Set(tokenstate.FloorKey, tokenstate.EncodeToken(m.floor), nil),
		b.Set(tokenstate.TierKey, []byte(m.tierID), nil),
		b.Set(tokenstate.LeaderKey, m.leader.encode(), nil),
	)
}

func (m *stateMeta) putApplied(b *pebble.Batch) error {
	return b.Set(tokenstate.AppliedKey, tokenstate.EncodeToken(m.applied), nil)
}

// reader is a pebble.DB or a pebble.Snapshot.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// loadMeta reads the m/ keys (a missing key reads as zero).
func loadMeta(r reader) (m stateMeta, err error) {
	var lead []byte
	for _, f := range []struct {
		key []byte
		u   *uint64
		s   *string
		b   *[]byte
	}{
		{key: tokenstate.AppliedKey, u: &m.applied}, {key: tokenstate.BoundKey, u: &m.bound}, {key: tokenstate.FloorKey, u: &m.floor},
		{key: tokenstate.TierKey, s: &m.tierID}, {key: tokenstate.LeaderKey, b: &lead},
	} {
		v, closer, err := r.Get(f.key)
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return m, fmt.Errorf("tier: reading the state's %s: %w", f.key, err)
		}
		switch {
		case f.u != nil:
			if len(v) != 8 {
				err = fmt.Errorf("tier: the state's %s is %d bytes", f.key, len(v))
			}
			*f.u = decodeUint(v)
		case f.s != nil:
			*f.s = string(v)
		default:
			*f.b = append([]byte(nil), v...)
		}
		closer.Close()
		if err != nil {
			return m, err
		}
	}
	if len(lead) > 0 {
		if m.leader, err = decodeLeader(lead); err != nil {
			return m, err
		}
	}
	return m, nil
}

func (l leaderInfo) encode() []byte {
	b := binary.AppendUvarint(nil, l.term)
	b = appendString(b, l.node)
	return appendString(b, l.addr)
}

func decodeLeader(b []byte) (leaderInfo, error) {
	d := decoder{b: b}
	l := leaderInfo{term: d.uvarint(), node: d.string(), addr: d.string()}
	if d.bad || len(d.b) != 0 {
		return l, errors.New("tier: the state's m/leader is unreadable")
	}
	return l, nil
}

// loadPending reads every p/ key.
func loadPending(r reader) (map[pendingKey]uint64, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: tokenstate.ReservedPrefix, UpperBound: tokenstate.PrefixUpper(tokenstate.ReservedPrefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	pending := map[pendingKey]uint64{}
	for ok := it.First(); ok; ok = it.Next() {
		k, ok := parsePendingKey(it.Key())
		term, n := binary.Uvarint(it.Value())
		if !ok || n <= 0 {
			return nil, fmt.Errorf("tier: unreadable reservation %q in the state", it.Key())
		}
		pending[k] = term
	}
	return pending, it.Error()
}

// decodeUint is a stored 8-byte value, 0 if it is not 8 bytes (the tier
// reads a short value as none).
func decodeUint(b []byte) uint64 {
	t, _ := tokenstate.DecodeToken(b)
	return t
}
