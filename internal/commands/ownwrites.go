package commands

import (
	"bytes"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The proxy's own keys are written only by the proxy (the contract's
// guarantee 7). Every key under the lock records' --key-prefix is one: the
// owner records (<prefix>{resource}), their lock-delay guards and fence
// marks (<prefix>{resource}:…), the token authority's keys
// (<prefix>{authority}:live and :bound) and the proxy's helper keys
// (<prefix>wait-offset). A client that wrote one could hand a resource to
// anyone, or plant a record whose token no fence store issued (the lock
// manager refuses to adopt those, but the resource stays refused until the
// record goes). So a request that names one of them as a key it writes or
// deletes is refused, whoever sends it, before it is queued in a
// transaction, sent on a tunnel or forwarded:
//
//   - The keys are the ones the request declares: Redis's own key specs
//     for the backend (internal/keys), with the flags that say which keys
//     a command writes (INSERT, UPDATE, DELETE: RENAME's and MIGRATE's
//     source too, which they delete), as the ACL check reads them
//     (aclKeyRefs: SET's, SORT ... STORE's). EVAL, EVALSHA and FCALL
//     declare their KEYS read-write; EVAL_RO, EVALSHA_RO and FCALL_RO
//     read-only, and Redis refuses any write from them, so they stay
//     allowed. A key a script writes without declaring it cannot be seen
//     here (nor routed in a cluster): Redis's own rule too.
//   - Reads (GET, TYPE, PTTL, DUMP, COPY's source ...) stay allowed:
//     LOCK.INFO is the supported view, but reading a record harms nothing.
//     Keyspace commands without keys (FLUSHALL, FLUSHDB, SCAN) stay
//     Redis's: the guarantees survive a flush (the fence store holds every
//     token issued).
//   - FENCE.EXEC's command is checked as if sent alone. The lock family's
//     own commands name resources, not keys.
//   - Inside MULTI the refused command is answered at once and the
//     transaction is flagged, so EXEC answers -EXECABORT, as Redis does
//     for a command it refuses while queueing (and as the ACL check does).
//   - Without the backend's COMMAND (Options.Keys nil, a standalone Redis
//     that refused it) key positions are unknown: only the reads of
//     readsWithoutTable may name a key under the prefix.
//
// Cost: a request none of whose arguments begins with the prefix (nearly
// every request) costs one byte compare per argument, and most arguments
// fail at their first byte; only a request with such an argument has its
// keys looked up. BenchmarkOwnKeyWritten: 4 ns for a SET, 20 ns for an
// MSET of 8 pairs, on the 2-core machine the other figures come from.

// ownKeyRefused is the error a refused request is answered with, after the
// key.
const ownKeyRefused = "' belongs to fenceproxy's lock family; use LOCK.* commands (writes to fenceproxy's own keys are refused)"

// ownPrefix is the prefix of the proxy's own keys: the lock records'
// --key-prefix, defaulted as the lock manager defaults it.
func ownPrefix(keyPrefix string) []byte {
	if keyPrefix == "" {
		keyPrefix = "fenceproxy:lock:"
	}
	return []byte(keyPrefix)
}

// refuseOwnWrite answers a request that writes or deletes one of the
// proxy's own keys, and reports whether it did. Inside MULTI the
// transaction is flagged so that EXEC aborts.
func (h *Handler) refuseOwnWrite(c *protocol.Conn, args [][]byte, p *resp.Reply) bool {
	key := h.ownKeyWritten(args)
	if key == nil {
		return false
	}
	h.opts.Metrics.OwnKeyWritesRefused.Inc()
	s := sessionOf(c)
	if s.tx.inMulti {
		s.tx.denied = true // as Redis flags a transaction with a refused command
	}
	h.refuse(s, p, "ERR fenceproxy: key '"+printable(key)+ownKeyRefused)
	return true
}

// ownKeyWritten returns the first of the proxy's own keys that args
// writes or deletes, nil if none.
func (h *Handler) ownKeyWritten(args [][]byte) []byte {
	if len(args) < 2 || !anyHasPrefix(args[1:], h.ownPrefix) {
		return nil // the hot path
	}
	var lower [32]byte
	if len(args[0]) <= len(lower) {
		if cmd := lookup(lowerInto(lower[:0], args[0])); cmd != nil && cmd.flags&flagOwn != 0 {
			if cmd.fenced > 0 && len(args) > cmd.fenced {
				return h.ownKeyWritten(args[cmd.fenced:])
			}
			return nil // a resource is not a key
		}
	}
	if h.opts.Keys == nil {
		if readsWithoutTable[lowerName(args[0])] {
			return nil
		}
		for _, a := range args[1:] {
			if bytes.HasPrefix(a, h.ownPrefix) {
				return a
			}
		}
		return nil
	}
	cmd := h.opts.Keys.LookupBytes(args[0])
	sub := cmd.Sub(args)
	if sub == nil {
		return nil // unknown to Redis: Redis refuses it
	}
	var buf [8]keys.KeyRef
	for _, r := range aclKeyRefs(cmd, sub.Name(), buf[:0], args) {
		if r.Write && bytes.HasPrefix(args[r.Pos], h.ownPrefix) {
			return args[r.Pos]
		}
	}
	return nil
}

// anyHasPrefix reports whether an argument begins with prefix (not empty).
func anyHasPrefix(args [][]byte, prefix []byte) bool {
	first := prefix[0]
	for _, a := range args {
		if len(a) >= len(prefix) && a[0] == first && bytes.Equal(a[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}

// readsWithoutTable are the commands that may name one of the proxy's own
// keys when the backend's COMMAND could not be read: plain reads of one
// key, which LOCK.INFO's users and operators send.
var readsWithoutTable = map[string]bool{
	"get": true, "type": true, "ttl": true, "pttl": true, "exists": true, "dump": true, "strlen": true,
	"hget": true, "hgetall": true, "hmget": true, "zrange": true, "zscore": true, "zcard": true,
	"object": true, "memory": true, "expiretime": true, "pexpiretime": true, "getrange": true,
}

// printable is key as an error reply may carry it: at most 128 bytes, and
// no control or non-ASCII byte (a CR or LF would end the reply).
func printable(key []byte) string {
	const most = 128
	b := make([]byte, 0, min(len(key), most)+3)
	for i, c := range key {
		if i == most {
			return string(append(b, "..."...))
		}
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return string(b)
}
