package upstream

import (
	"strconv"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

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

// broadcast sends args to every master of masters and merges the replies
// into p.
func (c *Cluster) broadcast(cl *Client, masters []*Node, args [][]byte, m fanout.Merge, p *resp.Reply) {
	if len(masters) == 0 {
		p.Err = backend.ErrUnavailable
		p.Done()
		return
	}
	if cl.track != nil {
		p = cl.track.Merged(p)
	}
	parts := fanout.FanIn(len(masters), func(replies []*resp.Reply) { fanout.Into(p, replies, nil, m) })
	if cl.track != nil {
		r := newRequest(cl, -1, resp.AppendCommand(nil, args))
		for i, n := range masters {
			r.deliver(n, false, false, parts[i])
		}
		return
	}
	for i, n := range masters {
		n.pool(cl.RESP3).Conn(cl.ID).Do(args, parts[i])
	}
}

// Control sends PING to the first master's control connection, and SCRIPT
// KILL or FUNCTION KILL to every master's: the script may run on any of
// them (fanout.MergeKill).
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
	parts := fanout.FanIn(len(masters), func(replies []*resp.Reply) { fanout.Into(p, replies, nil, fanout.MergeKill) })
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
		r.deliver(masters[at], false, false, part)
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
