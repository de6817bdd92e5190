package commands

import (
	"bytes"
	"net"
	"strconv"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The proxy's own keys in what it relays. The token authority writes its
// live set twice a second (internal/authority), so Redis tells whoever
// listens (Options.OwnKeys names them): keyspace notifications (__keyspace@15__:<prefix>{authority}:live,
// __keyevent@15__:zadd and, under maxmemory, evicted), and invalidations
// for a CLIENT TRACKING BCAST client (RESP3 pushes, or __redis__:invalidate
// messages to the client it redirects to). A client listening to all of
// them (PSUBSCRIBE *, BCAST without a prefix) would read the proxy's
// bookkeeping between the events of its own keys, which Redis without the
// proxy never sends. So the messages relayed to pub/sub tunnels and the
// tracking pushes pass through ownKeys: a notification of one of those keys
// is dropped, and an invalidation loses them (dropped if nothing is left).
// The lock family's owner records are its data and are relayed like any
// key.
//
// A message is looked at only if its bytes hold one of the names, so the
// common message is relayed as it came.

// ownKeys are the names hidden from relayed messages.
type ownKeys struct {
	names [][]byte
	// marker is what every name holds, for the quick look.
	marker []byte
}

// newOwnKeys hides names; the marker is what they all begin with.
func newOwnKeys(names []string) *ownKeys {
	o := &ownKeys{}
	for _, k := range names {
		o.names = append(o.names, []byte(k))
	}
	if len(o.names) > 0 {
		o.marker = o.names[0]
		for _, n := range o.names[1:] {
			o.marker = o.marker[:commonPrefix(o.marker, n)]
		}
	}
	return o
}

// commonPrefix is the length of what a and b begin with alike.
func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func (o *ownKeys) own(key []byte) bool {
	for _, n := range o.names {
		if bytes.Equal(key, n) {
			return true
		}
	}
	return false
}

var (
	msgMessage    = []byte("message")
	msgPMessage   = []byte("pmessage")
	msgInvalidate = []byte("invalidate")
	keyspacePfx   = []byte("__keyspace@")
	keyeventPfx   = []byte("__keyevent@")
	invalidateCh  = []byte("__redis__:invalidate")
)

// filter returns msg, one whole message Redis sent to a subscriber or a
// tracking client, as the client is to get it: msg itself, a copy without
// the proxy's keys, or nil to drop it.
func (o *ownKeys) filter(msg []byte) []byte {
	if len(o.names) == 0 || !bytes.Contains(msg, o.marker) {
		return msg
	}
	elems, ok := resp.Elements(msg)
	if !ok || len(elems) < 2 {
		return msg
	}
	kind, _ := bulkBytes(elems[0])
	switch {
	case bytes.Equal(kind, msgInvalidate) && len(elems) == 2: // RESP3 push
		return o.invalidation(msg, elems, 1)
	case bytes.Equal(kind, msgMessage) && len(elems) == 3:
		return o.message(msg, elems, 1)
	case bytes.Equal(kind, msgPMessage) && len(elems) == 4:
		return o.message(msg, elems, 2)
	}
	return msg
}

// message filters a (p)message whose channel is elems[ch] and payload
// elems[ch+1].
func (o *ownKeys) message(msg []byte, elems [][]byte, ch int) []byte {
	channel, _ := bulkBytes(elems[ch])
	payload, _ := bulkBytes(elems[ch+1])
	switch {
	case bytes.HasPrefix(channel, keyspacePfx):
		if i := bytes.Index(channel, []byte("__:")); i > 0 && o.own(channel[i+3:]) {
			return nil
		}
	case bytes.HasPrefix(channel, keyeventPfx):
		if o.own(payload) {
			return nil
		}
	case bytes.Equal(channel, invalidateCh):
		return o.invalidation(msg, elems, ch+1)
	}
	return msg
}

// invalidation filters a message whose elems[at] is an invalidation's
// array of keys.
func (o *ownKeys) invalidation(msg []byte, elems [][]byte, at int) []byte {
	keys, ok := resp.Elements(elems[at])
	if !ok {
		return msg // a null: everything (FLUSHALL)
	}
	kept := keys[:0:0]
	for _, k := range keys {
		if name, _ := bulkBytes(k); !o.own(name) {
			kept = append(kept, k)
		}
	}
	switch {
	case len(kept) == len(keys):
		return msg
	case len(kept) == 0:
		return nil
	}
	out := make([]byte, 0, len(msg))
	out = append(out, msg[:len(msg)-resp.ElementsLen(elems)]...) // the message's header
	for i, e := range elems {
		if i != at {
			out = append(out, e...)
			continue
		}
		out = append(out, elems[at][0])
		out = strconv.AppendInt(out, int64(len(kept)), 10)
		out = append(out, '\r', '\n')
		for _, k := range kept {
			out = append(out, k...)
		}
	}
	return out
}

// bulkBytes is the content of a whole bulk string reply ($ or RESP3's
// verbatim '='); ok is false for anything else.
func bulkBytes(raw []byte) ([]byte, bool) {
	if len(raw) < 4 || raw[0] != '$' {
		return nil, false
	}
	i := bytes.IndexByte(raw, '\n')
	if i < 0 || len(raw) < i+1+2 {
		return nil, false
	}
	return raw[i+1 : len(raw)-2], true
}

// maxPendingMessage bounds the start of a message kept waiting for its
// end: a bulk string as long as Redis allows, and its framing.
const maxPendingMessage = resp.MaxBulk + 64<<10

// A streamFilter cuts what Redis sends a client on a connection of its
// own into units and says what the client gets of each: next looks at the
// start of the stream, data, and returns how many bytes of it make its
// next unit (0: not whole yet) with out, what to write for it, appended.
type streamFilter interface {
	next(data, out []byte) (n int, _ []byte)
}

// relayConn is a client's connection as a tunnel writes to it: what Redis
// sends comes in chunks, is cut into units by its filter, and what the
// filter keeps of a chunk is written together.
type relayConn struct {
	net.Conn
	filter streamFilter

	mu      sync.Mutex
	pending []byte // the start of a unit not yet whole
	out     []byte
}

func (h *relayConn) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	data := b
	if len(h.pending) > 0 {
		h.pending = append(h.pending, b...)
		data = h.pending
	}
	out := h.out[:0]
	for len(data) > 0 {
		if h.filter == nil {
			out = append(out, data...)
			data = nil
			break
		}
		n, next := h.filter.next(data, out)
		if n == 0 {
			if len(data) <= maxPendingMessage {
				break // the rest comes with the next chunk
			}
			// Larger than any message Redis relays: not RESP the proxy
			// can frame. Relayed as it is, from here on.
			h.filter = nil
			continue
		}
		out, data = next, data[n:]
	}
	if len(data) > 0 {
		h.pending = append(h.pending[:0], data...)
	} else {
		h.pending = h.pending[:0]
	}
	h.out = out
	if len(out) > 0 {
		if _, err := h.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// next frames one pub/sub message or reply (ownKeys as a streamFilter).
func (o *ownKeys) next(data, out []byte) (int, []byte) {
	n, ok := resp.Size(data)
	if !ok {
		return 0, out
	}
	return n, append(out, o.filter(data[:n])...)
}

// pubsubRelay is a pub/sub tunnel's streamFilter: ownKeys', and the
// client's subscription counts for CLIENT LIST from Redis's confirmations
// (each carries how many channels and patterns, or shard channels, the
// connection has after it).
type pubsubRelay struct {
	own *ownKeys
	ci  *clientInfo
}

var confirmations = []struct {
	head  string
	shard bool
	pat   bool
}{
	{"$9\r\nsubscribe\r\n", false, false}, {"$11\r\nunsubscribe\r\n", false, false},
	{"$10\r\npsubscribe\r\n", false, true}, {"$12\r\npunsubscribe\r\n", false, true},
	{"$10\r\nssubscribe\r\n", true, false}, {"$12\r\nsunsubscribe\r\n", true, false},
}

func (r *pubsubRelay) next(data, out []byte) (int, []byte) {
	n, ok := resp.Size(data)
	if !ok {
		return 0, out
	}
	msg := data[:n]
	if msg[0] == '-' {
		if refusal := subscribedRefusal(msg); refusal != nil {
			return n, append(out, refusal...)
		}
	}
	if len(msg) > 4 && msg[1] == '3' && msg[2] == '\r' && (msg[0] == '*' || msg[0] == '>') {
		for _, k := range confirmations {
			if bytes.HasPrefix(msg[4:], []byte(k.head)) {
				r.count(msg, k.shard, k.pat)
				break
			}
		}
	}
	return n, append(out, r.own.filter(msg)...)
}

// count takes a confirmation's count: for shard channels, their number;
// else channels and patterns together, so the change goes to the kind
// confirmed.
func (r *pubsubRelay) count(msg []byte, shard, pat bool) {
	elems, ok := resp.Elements(msg)
	if !ok || len(elems) != 3 || len(elems[2]) < 4 || elems[2][0] != ':' {
		return
	}
	total, ok := resp.ParseInt(elems[2][1 : len(elems[2])-2])
	if !ok {
		return
	}
	ci := r.ci
	switch {
	case shard:
		ci.ssubs.Store(int32(total))
	case pat:
		ci.psubs.Store(int32(total) - ci.subs.Load())
	default:
		ci.subs.Store(int32(total) - ci.psubs.Load())
	}
}
