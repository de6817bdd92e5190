package upstream

import (
	"bytes"
	"strconv"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// The proxy's own keys in front of a Redis Cluster (Options.OwnKeys: the
// token authority's). A standalone master keeps them in a database no
// client uses; a Redis Cluster has only database 0, where they sit beside
// the clients' keys. DBSIZE, KEYS and SCAN leave them out, so a client
// counts and lists only what it wrote (Redis's suite waits for DBSIZE 0
// after its keys expire). DBSIZE's count on their master comes from one
// script (DBSIZE less the own keys that exist, atomically: the authority
// writes them again within a heartbeat of a FLUSHALL). RANDOMKEY and INFO's
// keyspace section still count them.

// ownDBSize is the script that counts the keys of its master but KEYS.
const ownDBSize = "return redis.call('DBSIZE') - redis.call('EXISTS', unpack(KEYS))"

// setOwnKeys records the proxy's own keys (Options.OwnKeys).
func (c *Cluster) setOwnKeys(names []string) {
	for _, n := range names {
		c.own = append(c.own, []byte(n))
	}
	if len(c.own) > 0 {
		c.ownSlot = keys.SlotOf(c.own[0])
	}
}

// isOwn reports whether key is one of the proxy's own keys.
func (c *Cluster) isOwn(key []byte) bool {
	for _, o := range c.own {
		if bytes.Equal(key, o) {
			return true
		}
	}
	return false
}

// dbsize is DBSIZE on every master, less the proxy's own keys: the master
// of their slot answers the script, the others DBSIZE. Always on shared
// connections (a tracking client's would track the own keys the script
// reads), after the client's earlier requests have their replies.
func (c *Cluster) dbsize(cl *Client, args [][]byte, p *resp.Reply) {
	masters := c.Masters()
	ownMaster := c.target(c.ownSlot)
	if len(masters) == 0 || ownMaster == nil {
		p.Err = backend.ErrUnavailable
		p.Done()
		return
	}
	if cl.track != nil && cl.Conn != nil {
		cl.Conn.AfterReplies(p, func() { c.dbsizeOn(cl, masters, ownMaster, args, p) })
		return
	}
	c.dbsizeOn(cl, masters, ownMaster, args, p)
}

// dbsizeOn is dbsize once the client's earlier requests have their
// replies.
func (c *Cluster) dbsizeOn(cl *Client, masters []*Node, ownMaster *Node, args [][]byte, p *resp.Reply) {
	script := [][]byte{[]byte("EVAL"), []byte(ownDBSize), strconv.AppendInt(nil, int64(len(c.own)), 10)}
	script = append(script, c.own...)
	parts := fanout.FanIn(len(masters), func(replies []*resp.Reply) { fanout.Into(p, replies, nil, fanout.MergeSum) })
	for i, n := range masters {
		if n == ownMaster {
			c.send(request{slot: c.ownSlot, resp3: cl.RESP3, connID: cl.ID, encoded: resp.AppendCommand(nil, script)}, parts[i])
			continue
		}
		n.pool(cl.RESP3).Conn(cl.ID).Do(args, parts[i])
	}
}

// withoutOwn wraps a KEYS merge: the proxy's own keys are left out.
func (c *Cluster) withoutOwn(m fanout.Merge) fanout.Merge {
	return func(parts [][]byte, order [][2]int, dst []byte) []byte {
		start := len(dst)
		dst = m(parts, order, dst)
		elems, ok := resp.Elements(dst[start:])
		if !ok || len(elems) == 0 {
			return dst
		}
		kept := elems[:0:0]
		for _, e := range elems {
			if k, _ := resp.BulkString(e); !c.isOwn([]byte(k)) {
				kept = append(kept, e)
			}
		}
		if len(kept) == len(elems) {
			return dst
		}
		kept = cloneAll(kept)
		return fanout.AppendElements(dst[:start], kept)
	}
}

// cloneAll copies elements that point into a buffer about to be reused.
func cloneAll(elems [][]byte) [][]byte {
	out := make([][]byte, len(elems))
	for i, e := range elems {
		out[i] = bytes.Clone(e)
	}
	return out
}

// scanWithoutOwn rewrites a SCAN reply (cursor, keys) without the proxy's
// own keys.
func (c *Cluster) scanWithoutOwn(reply []byte) []byte {
	found := false
	for _, o := range c.own {
		found = found || bytes.Contains(reply, o)
	}
	if !found {
		return reply
	}
	elems, ok := resp.Elements(reply)
	if !ok || len(elems) != 2 {
		return reply
	}
	list, ok := resp.Elements(elems[1])
	if !ok {
		return reply
	}
	kept := list[:0:0]
	for _, e := range list {
		if k, _ := resp.BulkString(e); !c.isOwn([]byte(k)) {
			kept = append(kept, e)
		}
	}
	if len(kept) == len(list) {
		return reply
	}
	out := append([]byte("*2\r\n"), elems[0]...)
	return fanout.AppendElements(out, kept)
}
