package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/fenceproxy/fenceproxy/internal/persist"
)

// The state machine's Pebble database (Options.Dir/state), beside the Raft
// log store. Every key family, and what it holds:
//
//	m/applied          8-byte big-endian: the index of the last command entry
//	                   applied (written in the same batch as its effects)
//	m/bound, m/floor   8-byte big-endian: the window bound and the floor
//	m/tier             the tier's id
//	m/leader           the last LeaderStart's term, node id and client address
//	t/<resource>       8-byte big-endian: the resource's newest token,
//	                   written with persist's max merge operator
//	p/<token><resource>  uvarint: the term of the leader that reserved token
//	                     (8-byte big-endian) for resource, not yet confirmed
//	                     or cancelled
var (
	appliedKey = []byte("m/applied")
	boundKey   = []byte("m/bound")
	floorKey   = []byte("m/floor")
	tierKey    = []byte("m/tier")
	leaderKey  = []byte("m/leader")

	tokenPrefix   = []byte("t/")
	pendingPrefix = []byte("p/")
	// Every key sorts between these (a restore deletes the range).
	keysLower, keysUpper = []byte{0}, []byte{0xff}
)

func tokenKey(resource string) []byte {
	k := make([]byte, 0, len(tokenPrefix)+len(resource))
	return append(append(k, tokenPrefix...), resource...)
}

func pendingKeyBytes(p pendingKey) []byte {
	k := make([]byte, 0, len(pendingPrefix)+8+len(p.resource))
	k = append(k, pendingPrefix...)
	k = binary.BigEndian.AppendUint64(k, p.token)
	return append(k, p.resource...)
}

func parsePendingKey(k []byte) (pendingKey, bool) {
	if len(k) < len(pendingPrefix)+8 {
		return pendingKey{}, false
	}
	k = k[len(pendingPrefix):]
	return pendingKey{token: binary.BigEndian.Uint64(k), resource: string(k[8:])}, true
}

// prefixUpper is the first key after every key that starts with prefix
// (prefixes here end below 0xff).
func prefixUpper(prefix []byte) []byte {
	u := append([]byte(nil), prefix...)
	u[len(u)-1]++
	return u
}

func openStateDB(dir string, logger *slog.Logger) (*pebble.DB, error) {
	// A token is merged into t/<resource> (persist.MaxMerger: the value is
	// the maximum of every token written), so applying a Confirm or a fold
	// reads nothing: a read per Confirm (to take the maximum, and to count
	// new resources) was 11% of a leader's CPU on lock cycles.
	opts := &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Merger: persist.MaxMerger, Logger: pebbleLogger{logger}}
	// Most reads of a resource new to the cache look for a key that is not
	// there at all (a resource never granted before): Bloom filters answer
	// that without reading data blocks (as in internal/persist).
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
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
		b.Set(boundKey, encodeUint(m.bound), nil),
		b.Set(floorKey, encodeUint(m.floor), nil),
		b.Set(tierKey, []byte(m.tierID), nil),
		b.Set(leaderKey, m.leader.encode(), nil),
	)
}

func (m *stateMeta) putApplied(b *pebble.Batch) error {
	return b.Set(appliedKey, encodeUint(m.applied), nil)
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
		{key: appliedKey, u: &m.applied}, {key: boundKey, u: &m.bound}, {key: floorKey, u: &m.floor},
		{key: tierKey, s: &m.tierID}, {key: leaderKey, b: &lead},
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
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: pendingPrefix, UpperBound: prefixUpper(pendingPrefix)})
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

func encodeUint(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decodeUint(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
