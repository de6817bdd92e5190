package commands

import (
	"strconv"
	"sync/atomic"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/cluster"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// In front of a Redis Cluster a client sees one node. A request goes to the
// master of its keys' slot, the keys found by the backend's own COMMAND key
// specifications (package keys). Requests whose keys span slots are split
// per slot and merged where Redis's semantics allow (splitCommands, and
// scripts known to treat each key alone); any other gets -CROSSSLOT, as
// Redis Cluster answers. Keyless commands that concern the whole keyspace
// run on every master (see broadcast); other keyless commands go to the
// first master.

const replyCrossSlot = "-CROSSSLOT Keys in request don't hash to the same slot\r\n"

// splitCommands may be split per slot: each key is independent, and the
// replies merge into what one node would have answered.
var splitCommands = map[string]merge{
	"mget":   mergeArrays,
	"mset":   mergeOK,
	"del":    mergeSum,
	"unlink": mergeSum,
	"exists": mergeSum,
	"touch":  mergeSum,
}

// keywiseScripts are Lua scripts known to treat each of their keys alone,
// with ARGV made of some leading arguments shared by all keys and then one
// argument per key, and to return an array with one element per key. Split
// per slot they give the same answer. The one here is Redisson's (3.44+)
// watchdog renewal, which renews up to 100 locks of any slots in one EVAL.
var keywiseScripts = map[string]keywiseScript{} // by SHA-1 of the body

type keywiseScript struct {
	body   string // sent with EVAL, so no master ever answers NOSCRIPT
	shared int    // leading ARGV shared by every key
}

const redissonRenewal = "local result = {} " +
	"for i = 1, #KEYS, 1 do " +
	"if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then " +
	"redis.call('pexpire', KEYS[i], ARGV[1]); " +
	"table.insert(result, 1); " +
	"else " +
	"table.insert(result, 0); " +
	"end; " +
	"end; " +
	"return result;"

func init() {
	keywiseScripts[cluster.ScriptSHA(redissonRenewal)] = keywiseScript{body: redissonRenewal, shared: 1}
}

// route forwards a request in front of a Redis Cluster.
func (h *Handler) route(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply) {
	var lower [32]byte
	name := lowerInto(lower[:0], args[0])
	if b, ok := broadcasts[string(name)]; ok {
		if b.applies(args) {
			h.afterViewChange(c, s, p)
			h.broadcast(c, s, args, b.merge, p)
			return
		}
	}
	if string(name) == "scan" {
		h.afterViewChange(c, s, p)
		h.scan(c, s, args, p)
		return
	}
	slot := -1
	var positions []int
	if cmd := h.opts.Keys.LookupBytes(args[0]); cmd != nil {
		var buf [16]int
		positions = cmd.Keys(buf[:0], args)
	}
	cross := false
	for i, at := range positions {
		sl := keys.SlotOf(args[at])
		if i == 0 {
			slot = sl
		} else if sl != slot {
			cross = true
			break
		}
	}
	if cross {
		h.afterViewChange(c, s, p)
		h.crossSlot(c, s, string(name), args, positions, p)
		return
	}
	h.opts.Metrics.PassthroughCommands.Inc()
	node, epoch := h.opts.Cluster.Route(slot)
	if epoch != s.viewEpoch {
		// A slot changed master since this client's last request: the
		// requests routed by the old view, and their redirects, finish
		// first, so this one cannot overtake them.
		if s.viewEpoch != 0 {
			c.WaitReplies(p)
			node, epoch = h.opts.Cluster.Route(slot)
		}
		s.viewEpoch = epoch
	}
	h.opts.Cluster.Forward(node, slot, s != nil && s.resp3, c.ID, args, p)
}

// afterViewChange makes a request wait, if a slot changed master since the
// client's last request, for the requests routed by the old view (and their
// redirects): a request must not overtake one the client sent before it.
// (The single-slot path in route does the same from one reading of the
// view.)
func (h *Handler) afterViewChange(c *protocol.Conn, s *session, p *resp.Reply) {
	if e := h.opts.Cluster.Epoch(); e != s.viewEpoch {
		if s.viewEpoch != 0 {
			c.WaitReplies(p)
		}
		s.viewEpoch = h.opts.Cluster.Epoch()
	}
}

// crossSlot serves a request whose keys span slots: split it if its
// semantics allow, else answer as Redis Cluster does.
func (h *Handler) crossSlot(c *protocol.Conn, s *session, name string, args [][]byte, positions []int, p *resp.Reply) {
	if m, ok := splitCommands[name]; ok {
		stride := 1
		if name == "mset" {
			stride = 2
		}
		h.split(c, s, args, positions, 1, stride, m, p)
		return
	}
	if (name == "eval" || name == "evalsha") && len(args) >= 3 {
		sha := string(args[1])
		if name == "eval" {
			sha = cluster.ScriptSHA(sha)
		}
		if ks, ok := keywiseScripts[lowerName([]byte(sha))]; ok {
			n, ok := parseInt(args[2])
			if ok && int(n) == len(positions) && len(args) == 3+2*int(n)+ks.shared {
				h.splitScript(c, s, args, int(n), ks, p)
				return
			}
		}
	}
	h.opts.Metrics.PassthroughCommands.Inc()
	p.Buf = append(p.Buf, replyCrossSlot...)
	p.Done()
}

// merge combines the replies of the parts of a split request (in the
// order of the parts) into one reply; order maps each element of a merged
// array to its part and its index there.
type merge func(parts [][]byte, order [][2]int, dst []byte) []byte

// group is the part of a split request bound for one slot.
type group struct {
	slot  int
	items []int // indexes of its keys among the request's, in request order
}

// groupBySlot groups n keys by slot, groups in order of first appearance;
// order[i] is key i's group and its place in it.
func groupBySlot(n int, key func(i int) []byte) (groups []group, order [][2]int) {
	bySlot := map[int]int{}
	order = make([][2]int, n)
	for i := range n {
		sl := keys.SlotOf(key(i))
		g, ok := bySlot[sl]
		if !ok {
			g = len(groups)
			bySlot[sl] = g
			groups = append(groups, group{slot: sl})
		}
		order[i] = [2]int{g, len(groups[g].items)}
		groups[g].items = append(groups[g].items, i)
	}
	return groups, order
}

// split sends one request per slot: the command name (and any prefix
// arguments up to first) followed by that slot's key groups (a key and the
// stride-1 arguments after it), then merges the replies.
func (h *Handler) split(c *protocol.Conn, s *session, args [][]byte, positions []int, first, stride int, m merge, p *resp.Reply) {
	for _, at := range positions {
		if at+stride > len(args) {
			// MSET k v k: a key without its value. One Redis says so;
			// slicing on would read past the request's arguments.
			replyError(p, "ERR wrong number of arguments for '"+lowerName(args[0])+"' command")
			return
		}
	}
	groups, order := groupBySlot(len(positions), func(i int) []byte { return args[positions[i]] })
	reqs := make([][]byte, len(groups))
	for g, gr := range groups {
		part := append([][]byte(nil), args[:first]...)
		for _, i := range gr.items {
			at := positions[i]
			part = append(part, args[at:at+stride]...)
		}
		reqs[g] = resp.AppendCommand(nil, part)
	}
	h.gather(c, s, groups, reqs, order, m, p)
}

// splitScript splits a keywise script call: EVAL body numkeys keys...
// shared-args... per-key-args...
func (h *Handler) splitScript(c *protocol.Conn, s *session, args [][]byte, n int, ks keywiseScript, p *resp.Reply) {
	keyArgs := args[3 : 3+n]
	sharedArgs := args[3+n : 3+n+ks.shared]
	perKey := args[3+n+ks.shared:]
	prefix := [][]byte{[]byte("EVAL"), []byte(ks.body)}
	groups, order := groupBySlot(n, func(i int) []byte { return keyArgs[i] })
	reqs := make([][]byte, len(groups))
	for g, gr := range groups {
		part := append([][]byte(nil), prefix...)
		part = append(part, strconv.AppendInt(nil, int64(len(gr.items)), 10))
		for _, i := range gr.items {
			part = append(part, keyArgs[i])
		}
		part = append(part, sharedArgs...)
		for _, i := range gr.items {
			part = append(part, perKey[i])
		}
		reqs[g] = resp.AppendCommand(nil, part)
	}
	h.gather(c, s, groups, reqs, order, mergeArrays, p)
}

// gather sends each part to its slot and merges the replies into p.
func (h *Handler) gather(c *protocol.Conn, s *session, groups []group, reqs [][]byte, order [][2]int, m merge, p *resp.Reply) {
	h.opts.Metrics.PassthroughCommands.Inc()
	parts := fanIn(len(groups), func(replies []*resp.Reply) { mergeInto(p, replies, order, m) })
	resp3 := s != nil && s.resp3
	for g, gr := range groups {
		h.opts.Cluster.Send(cluster.Request{Slot: gr.slot, RESP3: resp3, ConnID: c.ID, Encoded: reqs[g]}, parts[g])
	}
}

// fanIn returns n Replies for the parts of one client request sent to
// several masters; when the last of them is done, done gets them in part
// order.
func fanIn(n int, done func(parts []*resp.Reply)) []*resp.Reply {
	parts := make([]*resp.Reply, n)
	var left atomic.Int32
	left.Store(int32(n))
	for i := range parts {
		parts[i] = resp.NewReplyFunc(func() {
			if left.Add(-1) == 0 {
				done(parts)
			}
		})
	}
	return parts
}

// mergeInto answers p with the merge of the parts' replies, or, if a part
// got none (its master could not be reached, or the connection broke with
// it), with the first such part's error: the request did not run whole.
func mergeInto(p *resp.Reply, parts []*resp.Reply, order [][2]int, m merge) {
	replies := make([][]byte, len(parts))
	for i, part := range parts {
		if part.Err != nil {
			replyErr(p, part.Err)
			return
		}
		replies[i] = part.Buf
	}
	p.Buf = m(replies, order, p.Buf)
	p.Done()
}

// replyBadPart answers a split request when a master's reply to its part
// is not what that command returns.
const replyBadPart = "-ERR fenceproxy: unexpected reply from a Redis Cluster master to part of a request\r\n"

// firstError returns the first part's reply that is an error, if any.
func firstError(parts [][]byte) []byte {
	for _, r := range parts {
		if len(r) > 0 && r[0] == '-' {
			return r
		}
	}
	return nil
}

// arrays splits every part's array reply into its elements. If a part is
// an error (Redis's own) or not an array, reply is what the client gets
// instead.
func arrays(parts [][]byte) (lists [][][]byte, reply []byte) {
	if e := firstError(parts); e != nil {
		return nil, e
	}
	lists = make([][][]byte, len(parts))
	for i, r := range parts {
		var ok bool
		if lists[i], ok = resp.Elements(r); !ok {
			return nil, []byte(replyBadPart)
		}
	}
	return lists, nil
}

// mergeArrays rebuilds one array, each element taken from its part.
func mergeArrays(parts [][]byte, order [][2]int, dst []byte) []byte {
	lists, bad := arrays(parts)
	if bad != nil {
		return append(dst, bad...)
	}
	for _, o := range order {
		if o[1] >= len(lists[o[0]]) {
			return append(dst, replyBadPart...)
		}
	}
	dst = redcon.AppendArray(dst, len(order))
	for _, o := range order {
		dst = append(dst, lists[o[0]][o[1]]...)
	}
	return dst
}

// mergeSum adds integer replies.
func mergeSum(parts [][]byte, _ [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	var sum int64
	for _, r := range parts {
		v, err := resp.Parse(r)
		n, ok := v.(int64)
		if err != nil || !ok {
			return append(dst, replyBadPart...)
		}
		sum += n
	}
	return redcon.AppendInt(dst, sum)
}

// mergeOK answers the first error, or the first reply (+OK) if none.
func mergeOK(parts [][]byte, _ [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	return append(dst, parts[0]...)
}

// lowerInto appends b in lower case to dst (for map lookups that do not
// allocate).
func lowerInto(dst, b []byte) []byte {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// lowerName is b in lower case (a command or subcommand name).
func lowerName(b []byte) string {
	var buf [32]byte
	return string(lowerInto(buf[:0], b))
}
