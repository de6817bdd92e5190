package commands

import (
	"bytes"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// SYNC: Redis's replication stream, through the proxy, in front of a
// standalone Redis. The client's connection becomes a tunnel to a Redis
// connection of its own (as pub/sub's, pubsub.go) that sends SYNC: Redis
// answers with a snapshot (an RDB payload, relayed as it comes) and then
// the stream of every write, which tools read to follow a dataset (and
// Redis's own test suite reads to check what a command propagates).
//
// The stream is relayed without the token authority's writes: its
// heartbeat writes its live set twice a second, which Redis without the
// proxy would never send, between any two writes of the clients. A command
// on one of its keys is dropped, and so is a MULTI ... EXEC that held only
// such commands; SELECTs are sent as Redis sends them, only where the
// database of the next command relayed changes (Redis selects the
// authority's database before each heartbeat, and the clients' again
// after). The snapshot does hold the two keys.
//
// PSYNC stays refused: a partial resynchronisation names an offset in
// Redis's stream, which counts bytes this one leaves out. A Redis replica
// told -ERR for PSYNC falls back to SYNC. A replica that follows the proxy
// so holds the clients' data (and a copy of the authority's keys as the
// snapshot had them, which it never writes again).

const replyPSyncRefused = "ERR fenceproxy: PSYNC is not served through fenceproxy (the stream it relays leaves out the proxy's own writes, so Redis's offsets do not apply); use SYNC, or connect to Redis directly"

func (h *Handler) sync(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if h.streamRefused(s, "SYNC", args, p) {
		return
	}
	h.openTunnel(c, s, args, p, tunnelSync, nil, func() streamFilter {
		return &replicaStream{own: h.own, upDB: -1, downDB: -1}
	})
}

// replicaStream is the streamFilter of a SYNC tunnel: Redis's answer to
// SYNC (newlines while it prepares the snapshot, then "$<length>" and the
// RDB payload), relayed as it is, then the stream of commands, filtered.
type replicaStream struct {
	own *ownKeys
	// rdb is how much of the payload is still to come (-1: its header has
	// not come yet); commands: the payload is through.
	rdb      int64
	header   bool
	commands bool

	// upDB is the database of the command Redis sends next (its last
	// SELECT), downDB the one the client was last told; selectRaw is that
	// SELECT as Redis sent it.
	upDB, downDB int64
	selectRaw    []byte
	// multi is an open MULTI (its bytes) and block what Redis sent inside
	// it so far, held until EXEC says whether any of it is relayed.
	multi []byte
	block [][]byte
}

func (r *replicaStream) next(data, out []byte) (int, []byte) {
	switch {
	case r.commands:
		n, ok := resp.Size(data)
		if !ok {
			return 0, out
		}
		return n, r.command(data[:n], out)
	case r.header:
		n := int(min(int64(len(data)), r.rdb))
		if r.rdb -= int64(n); r.rdb == 0 {
			r.commands = true
		}
		return n, append(out, data[:n]...)
	case data[0] == '\n': // Redis is still preparing the snapshot
		return 1, append(out, '\n')
	}
	end := bytes.IndexByte(data, '\n')
	if end < 0 {
		return 0, out
	}
	line := data[:end+1]
	out = append(out, line...)
	n, ok := int64(0), false
	if line[0] == '$' && len(line) > 3 {
		var v int64
		v, ok = resp.ParseInt(bytes.TrimSuffix(line[1:], []byte("\r\n")))
		n = v
	}
	switch {
	case ok && n > 0:
		r.header, r.rdb = true, n
	case ok && n == 0:
		r.commands = true
	default:
		// An error (SYNC refused), or a form of payload this does not
		// frame ($EOF:, which only a replica that offers it gets): the
		// rest is relayed as it comes.
		return len(data), append(out, data[len(line):]...)
	}
	return len(line), out
}

// command relays one command of the stream, as the client is to get it.
func (r *replicaStream) command(raw, out []byte) []byte {
	elems, ok := resp.Elements(raw)
	if !ok || len(elems) == 0 {
		return append(out, raw...)
	}
	name, _ := bulkBytes(elems[0])
	switch keys.LowerName(name) {
	case "multi":
		r.multi, r.block = append(r.multi[:0], raw...), r.block[:0]
		return out
	case "exec":
		if r.multi == nil {
			return append(out, raw...)
		}
		kept := false
		for _, c := range r.block {
			if r.relayed(c) {
				kept = true
				break
			}
		}
		if kept {
			out = append(out, r.multi...)
		}
		for _, c := range r.block {
			out = r.emit(c, out)
		}
		r.multi, r.block = nil, r.block[:0]
		if kept {
			out = append(out, raw...)
		}
		return out
	}
	if r.multi != nil {
		r.block = append(r.block, append([]byte(nil), raw...))
		return out
	}
	return r.emit(raw, out)
}

// relayed reports whether a command of the stream reaches the client: not
// a SELECT (sent only before one that does), nor one of the proxy's keys.
func (r *replicaStream) relayed(raw []byte) bool {
	elems, _ := resp.Elements(raw)
	if len(elems) == 0 {
		return true
	}
	name, _ := bulkBytes(elems[0])
	if keys.LowerName(name) == "select" {
		return false
	}
	if len(elems) >= 2 {
		if key, ok := bulkBytes(elems[1]); ok && r.own.own(key) {
			return false
		}
	}
	return true
}

// emit appends a command of the stream to out, preceded by the SELECT of
// its database if the client was told another one last.
func (r *replicaStream) emit(raw, out []byte) []byte {
	elems, _ := resp.Elements(raw)
	if len(elems) == 0 {
		return append(out, raw...)
	}
	name, _ := bulkBytes(elems[0])
	switch keys.LowerName(name) {
	case "select":
		if len(elems) == 2 {
			if db, ok := bulkBytes(elems[1]); ok {
				if n, ok := resp.ParseInt(db); ok {
					r.upDB, r.selectRaw = n, append(r.selectRaw[:0], raw...)
				}
			}
		}
		return out
	case "ping", "replconf":
		return append(out, raw...) // Redis sends them with no database
	}
	if !r.relayed(raw) {
		return out
	}
	if r.upDB >= 0 && r.upDB != r.downDB {
		out = append(out, r.selectRaw...)
		r.downDB = r.upDB
	}
	return append(out, raw...)
}
