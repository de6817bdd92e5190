package commands

import (
	"math/rand/v2"
	"strconv"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Keyless commands about the whole keyspace, in front of a Redis Cluster:
// they run on every master and the replies merge into what one node
// holding every key would answer. DBSIZE is summed, KEYS concatenated,
// FLUSHALL/FLUSHDB/SCRIPT FLUSH/SCRIPT LOAD/FUNCTION LOAD... answer the
// first error or else the first master's reply, RANDOMKEY a key of a master
// picked at random, PUBSUB counts and lists every master's subscribers,
// SCRIPT EXISTS is 1 only
// where every master has the script (so a client that sees 1 can EVALSHA
// whatever the slot). SCAN (below) walks the masters one after another.

type broadcastRule struct {
	sub   map[string]bool // subcommands that broadcast; nil: the command itself
	merge merge
}

func (b broadcastRule) applies(args [][]byte) bool {
	return b.sub == nil || (len(args) > 1 && b.sub[lowerName(args[1])])
}

var broadcasts = map[string]broadcastRule{
	"dbsize":   {nil, mergeSum},
	"keys":     {nil, mergeConcat},
	"flushall": {nil, mergeOK},
	"flushdb":  {nil, mergeOK},
	"script":   {map[string]bool{"load": true, "flush": true, "exists": true}, mergeScript},
	"function": {map[string]bool{"load": true, "delete": true, "flush": true, "restore": true}, mergeOK},
	// RANDOMKEY: one master's key, the master picked at random, so a
	// cluster whose first master is empty still answers a key.
	"randomkey": {nil, mergeRandom},
	// PUBSUB: each node knows only its own subscribers (and a shard
	// channel lives on its slot's master), so ask them all.
	"pubsub": {map[string]bool{"channels": true, "shardchannels": true, "numsub": true, "shardnumsub": true, "numpat": true}, mergePubsub},
}

// broadcast sends args to every master and merges the replies into p.
func (h *Handler) broadcast(c *protocol.Conn, s *session, args [][]byte, m merge, p *resp.Reply) {
	h.opts.Metrics.PassthroughCommands.Inc()
	masters := h.opts.Cluster.Masters()
	if len(masters) == 0 {
		replyErr(p, backend.ErrUnavailable)
		return
	}
	parts := fanIn(len(masters), func(replies []*resp.Reply) { mergeInto(p, replies, nil, m) })
	resp3 := s != nil && s.resp3
	for i, n := range masters {
		pool := n.Pool
		if resp3 {
			pool = n.Pool3
		}
		pool.Conn(c.ID).Do(args, parts[i])
	}
}

// mergeRandom answers one non-null reply, starting the search at a random
// master.
func mergeRandom(parts [][]byte, _ [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	at := rand.IntN(len(parts))
	for i := range parts {
		r := parts[(at+i)%len(parts)]
		if r[0] == '$' && r[1] != '-' {
			return append(dst, r...)
		}
	}
	return append(dst, parts[0]...) // all empty: Redis's own null
}

// mergePubsub merges PUBSUB replies: NUMPAT summed, NUMSUB and SHARDNUMSUB
// summed per channel, CHANNELS and SHARDCHANNELS joined without repeats.
func mergePubsub(parts [][]byte, order [][2]int, dst []byte) []byte {
	if len(parts[0]) > 0 && parts[0][0] == ':' { // NUMPAT
		return mergeSum(parts, order, dst)
	}
	lists, bad := arrays(parts)
	if bad != nil {
		if parts[0][0] == '%' { // RESP3 NUMSUB is a map: the first master's
			return append(dst, parts[0]...)
		}
		return append(dst, bad...)
	}
	first := lists[0]
	if len(first) > 0 && len(first)%2 == 0 && first[1][0] == ':' { // NUMSUB: name, count, ...
		counts := make([]int64, len(first)/2)
		for _, l := range lists {
			if len(l) != len(first) {
				return append(dst, replyBadPart...)
			}
			for j := range counts {
				v, _ := resp.Parse(l[2*j+1])
				n, _ := v.(int64)
				counts[j] += n
			}
		}
		dst = redcon.AppendArray(dst, len(first))
		for j, n := range counts {
			dst = append(dst, first[2*j]...)
			dst = redcon.AppendInt(dst, n)
		}
		return dst
	}
	seen := map[string]bool{} // CHANNELS: the union
	var all [][]byte
	for _, l := range lists {
		for _, e := range l {
			if !seen[string(e)] {
				seen[string(e)] = true
				all = append(all, e)
			}
		}
	}
	return appendElements(dst, all)
}

// mergeConcat joins arrays (KEYS).
func mergeConcat(parts [][]byte, _ [][2]int, dst []byte) []byte {
	lists, bad := arrays(parts)
	if bad != nil {
		return append(dst, bad...)
	}
	var all [][]byte
	for _, l := range lists {
		all = append(all, l...)
	}
	return appendElements(dst, all)
}

// appendElements appends an array of elements already in RESP.
func appendElements(dst []byte, elems [][]byte) []byte {
	dst = redcon.AppendArray(dst, len(elems))
	for _, e := range elems {
		dst = append(dst, e...)
	}
	return dst
}

// mergeScript: SCRIPT EXISTS is the element-wise minimum (1 only if every
// master has the script); SCRIPT LOAD and FLUSH the first error, else the
// first reply.
func mergeScript(parts [][]byte, order [][2]int, dst []byte) []byte {
	if len(parts[0]) > 0 && parts[0][0] != '*' { // LOAD or FLUSH
		return mergeOK(parts, order, dst)
	}
	lists, bad := arrays(parts)
	if bad != nil {
		return append(dst, bad...)
	}
	dst = redcon.AppendArray(dst, len(lists[0]))
	for i := range lists[0] {
		all := true
		for _, l := range lists {
			all = all && i < len(l) && string(l[i]) == ":1\r\n"
		}
		if all {
			dst = redcon.AppendInt(dst, 1)
		} else {
			dst = redcon.AppendInt(dst, 0)
		}
	}
	return dst
}

// SCAN in front of a cluster walks the masters in slot order. The cursor a
// client sees carries the master's position in its low scanNodeBits bits
// and that master's own cursor above them; when a master's iteration ends
// the cursor moves to the next master with cursor 0. Every key present for
// the whole iteration is returned (at least once, as with Redis) as long as
// the set of masters does not change meanwhile.
const scanNodeBits = 10

func (h *Handler) scan(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply) {
	h.opts.Metrics.PassthroughCommands.Inc()
	if len(args) < 2 {
		p.Buf = append(p.Buf, "-ERR wrong number of arguments for 'scan' command\r\n"...)
		p.Done()
		return
	}
	cursor, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		p.Buf = append(p.Buf, "-ERR invalid cursor\r\n"...)
		p.Done()
		return
	}
	masters := h.opts.Cluster.Masters()
	at := int(cursor & (1<<scanNodeBits - 1))
	if at >= len(masters) {
		p.Buf = append(p.Buf, "*2\r\n$1\r\n0\r\n*0\r\n"...)
		p.Done()
		return
	}
	req := append([][]byte{args[0], strconv.AppendUint(nil, cursor>>scanNodeBits, 10)}, args[2:]...)
	var part *resp.Reply
	part = resp.NewReplyFunc(func() {
		if part.Err != nil {
			replyErr(p, part.Err)
			return
		}
		p.Buf = scanReply(part.Buf, at, len(masters), p.Buf)
		p.Done()
	})
	pool := masters[at].Pool
	if s != nil && s.resp3 {
		pool = masters[at].Pool3
	}
	pool.Conn(c.ID).Do(req, part)
}

// scanReply rewrites one master's SCAN reply with the client's cursor.
func scanReply(reply []byte, at, masters int, dst []byte) []byte {
	elems, ok := resp.Elements(reply)
	if !ok || len(elems) != 2 {
		return append(dst, reply...) // an error: Redis's own
	}
	v, err := resp.Parse(elems[0])
	str, _ := v.(string)
	next, perr := strconv.ParseUint(str, 10, 64)
	if err != nil || perr != nil {
		return append(dst, reply...)
	}
	switch {
	case next == 0 && at+1 < masters:
		next = uint64(at + 1)
	case next == 0:
	case next >= 1<<(64-scanNodeBits):
		return append(dst, "-ERR fenceproxy: a Redis Cluster master's SCAN cursor is too large to carry\r\n"...)
	default:
		next = next<<scanNodeBits | uint64(at)
	}
	dst = redcon.AppendArray(dst, 2)
	dst = redcon.AppendBulk(dst, strconv.AppendUint(nil, next, 10))
	return append(dst, elems[1]...)
}
