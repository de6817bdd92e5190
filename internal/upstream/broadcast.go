package upstream

import (
	"strconv"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Keyless commands about the whole keyspace, in front of a Redis Cluster:
// they run on every master and the replies merge into what one node
// holding every key would answer (merge.go). SCAN (below) walks the masters
// one after another instead.

// broadcastRule names a command (or some of its subcommands) that runs on
// every master, and how the replies merge.
type broadcastRule struct {
	command string   // lower case
	sub     []string // the subcommands that broadcast; nil: the command itself
	merge   merge
	// mergeArgs, if set, makes the merge from the request's arguments
	// and the masters it goes to (SLOWLOG GET's count and ids) instead of
	// merge.
	mergeArgs func(c *Cluster, masters []*Node, args [][]byte) merge
}

var broadcastTable = []broadcastRule{
	{command: "dbsize", merge: mergeSum},
	{command: "keys", merge: mergeConcat},
	{command: "flushall", merge: mergeOK},
	{command: "flushdb", merge: mergeOK},
	// SCRIPT EXISTS is 1 only where every master has the script, so that a
	// client that sees 1 can EVALSHA whatever the slot.
	{command: "script", sub: []string{"load", "flush", "exists"}, merge: mergeScript},
	// FUNCTION LIST and DUMP are the first master's: every master holds
	// what was loaded through the proxy.
	{command: "function", sub: []string{"load", "delete", "flush", "restore"}, merge: mergeOK},
	{command: "function", sub: []string{"stats"}, merge: mergeFunctionStats},
	// RANDOMKEY: one master's key, the master picked at random, so a
	// cluster whose first master is empty still answers a key.
	{command: "randomkey", merge: mergeRandom},
	// PUBSUB: each node knows only its own subscribers (and a shard
	// channel lives on its slot's master), so ask them all.
	{command: "pubsub", sub: []string{"channels", "shardchannels", "numsub", "shardnumsub", "numpat"}, merge: mergePubsub},
	// CONFIG SET (and RESETSTAT, REWRITE) on every master, which keeps
	// them alike: CONFIG GET is then the first master's answer. A setting
	// made through the proxy is also made on a master that joins later
	// (configs.go).
	{command: "config", sub: []string{"set", "resetstat", "rewrite"}, merge: mergeOK},
	// LATENCY and SLOWLOG: each master measures its own commands.
	{command: "latency", sub: []string{"latest"}, merge: mergeLatencyLatest},
	{command: "latency", sub: []string{"history"}, merge: mergeLatencyHistory},
	{command: "latency", sub: []string{"histogram"}, merge: mergeLatencyHistogram},
	{command: "latency", sub: []string{"reset"}, merge: mergeLargest},
	{command: "slowlog", sub: []string{"get"}, mergeArgs: func(c *Cluster, masters []*Node, args [][]byte) merge {
		return slowlogMerge(args, c.slowIDs.renumber(masters))
	}},
	{command: "slowlog", sub: []string{"len"}, merge: mergeSum},
	{command: "slowlog", sub: []string{"reset"}, merge: mergeOK},
	// DEBUG's switches of server behaviour (tests set them): every master.
	{command: "debug", sub: []string{"set-active-expire", "quicklist-packed-threshold", "set-skip-checksum-validation", "reload", "pause-cron"}, merge: mergeOK},
}

// keyedSubcommands are subcommands whose key Redis's key specifications do
// not name (DEBUG has none): the request goes to the master of the
// argument after the subcommand.
var keyedSubcommands = map[string]map[string]bool{
	"debug": {"object": true, "listpack": true, "quicklist": true, "ziplist": true, "sdslen": true, "digest-value": true},
}

// slotSubcommands name a slot by number in the argument after the
// subcommand: the request goes to that slot's master.
var slotSubcommands = map[string]map[string]bool{
	"cluster": {"countkeysinslot": true, "getkeysinslot": true},
}

// keyedSlot is the slot of a keyedSubcommands request's key, or the slot a
// slotSubcommands request names; -1 if args is neither (or names no valid
// slot: the first master then answers Redis's own error).
func keyedSlot(name []byte, args [][]byte) int {
	if len(args) <= 2 {
		return -1
	}
	if subs := keyedSubcommands[string(name)]; subs != nil && subs[keys.LowerName(args[1])] {
		return keys.SlotOf(args[2])
	}
	if subs := slotSubcommands[string(name)]; subs != nil && subs[keys.LowerName(args[1])] {
		if slot, ok := resp.ParseInt(args[2]); ok && slot >= 0 && slot < SlotCount {
			return int(slot)
		}
	}
	return -1
}

// broadcasts is broadcastTable by command, then subcommand ("" for a
// command that broadcasts whole).
var broadcasts = map[string]map[string]*broadcastRule{}

func init() {
	for i := range broadcastTable {
		r := &broadcastTable[i]
		if broadcasts[r.command] == nil {
			broadcasts[r.command] = map[string]*broadcastRule{}
		}
		if r.sub == nil {
			broadcasts[r.command][""] = r
		}
		for _, s := range r.sub {
			broadcasts[r.command][s] = r
		}
	}
}

// broadcastRuleOf returns the rule of a request that broadcasts, nil if it
// does not.
func broadcastRuleOf(subs map[string]*broadcastRule, args [][]byte) *broadcastRule {
	r := subs[""]
	if r == nil && len(args) > 1 {
		r = subs[keys.LowerName(args[1])]
	}
	return r
}

// mergeFor is r's merge of args sent to masters.
func (r *broadcastRule) mergeFor(c *Cluster, masters []*Node, args [][]byte) merge {
	if r.mergeArgs != nil {
		return r.mergeArgs(c, masters, args)
	}
	return r.merge
}

// broadcast sends args to every master of masters and merges the replies
// into p.
func (c *Cluster) broadcast(cl *Client, masters []*Node, args [][]byte, m merge, p *resp.Reply) {
	if len(masters) == 0 {
		p.Err = backend.ErrUnavailable
		p.Done()
		return
	}
	if cl.track != nil {
		p = cl.track.merged(p)
	}
	parts := fanIn(len(masters), func(replies []*resp.Reply) { mergeInto(p, replies, nil, m) })
	if cl.track != nil {
		r := newRequest(cl, -1, resp.AppendCommand(nil, args))
		for i, n := range masters {
			r.deliver(n, false, parts[i])
		}
		return
	}
	for i, n := range masters {
		n.pool(cl.RESP3).Conn(cl.ID).Do(args, parts[i])
	}
}

// Control sends PING to the first master's control connection, and SCRIPT
// KILL or FUNCTION KILL to every master's: the script may run on any of
// them (mergeKill).
func (c *Cluster) Control(cl *Client, args [][]byte, p *resp.Reply) {
	masters := c.Masters()
	if len(masters) == 0 {
		p.Err = backend.ErrUnavailable
		p.Done()
		return
	}
	if keys.LowerName(args[0]) == "ping" {
		masters[0].control.Do(args, p)
		return
	}
	parts := fanIn(len(masters), func(replies []*resp.Reply) { mergeInto(p, replies, nil, mergeKill) })
	for i, n := range masters {
		n.control.Do(args, parts[i])
	}
}

// SCAN in front of a cluster walks the masters in slot order. The cursor a
// client sees carries the master's position in its low scanNodeBits bits
// and that master's own cursor above them; when a master's iteration ends
// the cursor moves to the next master with cursor 0. Every key present for
// the whole iteration is returned (at least once, as with Redis) as long as
// the set of masters does not change meanwhile.
const scanNodeBits = 10

func (c *Cluster) scan(cl *Client, args [][]byte, p *resp.Reply) {
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
	masters := c.Masters()
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
			p.Err = part.Err
			p.Done()
			return
		}
		p.Buf = scanReply(c.scanWithoutOwn(part.Buf), at, len(masters), p.Buf)
		p.Done()
	})
	if cl.track != nil {
		r := newRequest(cl, -1, resp.AppendCommand(nil, req))
		r.deliver(masters[at], false, part)
		return
	}
	masters[at].pool(cl.RESP3).Conn(cl.ID).Do(req, part)
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
