package upstream

import (
	"bytes"
	"errors"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
	"github.com/fenceproxy/fenceproxy/internal/upstream/pubsub"
	"github.com/fenceproxy/fenceproxy/internal/upstream/tracking"
)

// A request sent into the cluster follows its slot: an -MOVED reply updates
// the view and the request goes again to the new master; -ASK sends it once
// to the importing master, after ASKING; -TRYAGAIN (a multi-key request
// during a slot migration), -CLUSTERDOWN (a failover under way) and a
// master the proxy cannot reach are retried, with a growing pause, while the
// topology is read again. A client therefore never sees MOVED or ASK, and
// sees the others only when the cluster has not recovered within
// RetryWindow. A reply lost with a broken connection is never retried: the
// request may have run.
const (
	// RetryWindow bounds how long a request waits for the cluster to heal
	// (a failover takes cluster-node-timeout plus about a second).
	RetryWindow  = 5 * time.Second
	maxRedirects = 16
)

// Forward sends a request in front of a Redis Cluster: a keyspace-wide
// command to every master (broadcast.go), SCAN to the master its cursor
// names, a request whose keys span slots split per slot (split.go), any
// other to the master of its keys' slot (keyless: the first master),
// through redirects.
func (c *Cluster) Forward(cl *Client, args [][]byte, p *resp.Reply) {
	var lower [32]byte
	name := keys.AppendLower(lower[:0], args[0])
	if cl.track != nil {
		// A tracking client's: on its own connections (package tracking).
		if string(name) == "client" && c.serveTracking(cl, args, p) {
			return
		}
		if cl.track != nil {
			cl.caching = cl.track.TakeCaching()
			defer func() { cl.caching = nil }()
		}
	}
	if !c.single(cl, name, args, p) {
		return
	}
	var buf [16]int
	slot, _, _ := c.slotOf(name, args, buf[:0])
	v := c.view.Load()
	node, epoch := v.target(slot), v.epoch
	if epoch != cl.view {
		// A slot changed master since this client's last request: the
		// requests routed by the old view, and their redirects, finish
		// first, so this one cannot overtake them (on the serve loop a
		// continuation: AfterReplies never waits there).
		if cl.view != 0 && cl.Conn != nil {
			c.forwardAfterReplies(cl, slot, args, p)
			return
		}
		cl.view = epoch
	}
	c.forwardTo(node, slot, cl, args, p)
}

// single reports whether Forward sends args to one master; if not, it
// has sent them (after the client's earlier replies if the view changed:
// afterViewChange). Out of Forward, so that the continuations' captures
// cost the one-master path no allocation.
//
//go:noinline
func (c *Cluster) single(cl *Client, name []byte, args [][]byte, p *resp.Reply) bool {
	if c.ownDBSize(name, args) {
		c.afterViewChange(cl, p, func() { c.dbsize(cl, args, p) })
		return false
	}
	if fanout.Broadcasts(name, args) {
		keysCmd := len(c.own) > 0 && string(name) == "keys"
		configSet := string(name) == "config" && keys.LowerName(args[1]) == "set"
		c.afterViewChange(cl, p, func() {
			masters := c.Masters()
			m := fanout.Broadcast(args, func() fanout.Renumber { return c.slowIDs.renumber(masters) })
			if keysCmd {
				m = c.withoutOwn(m)
			}
			p := p
			if configSet {
				p = c.configSet(args, p)
			}
			c.broadcast(cl, masters, args, m, p)
		})
		return false
	}
	if string(name) == "scan" {
		c.afterViewChange(cl, p, func() { c.scan(cl, args, p) })
		return false
	}
	var buf [16]int
	_, positions, single := c.slotOf(name, args, buf[:0])
	if !single {
		c.crossSlotAfter(cl, string(name), args, append([]int(nil), positions...), p)
		return false
	}
	return true
}

// crossSlotAfter is crossSlot after a view change (afterViewChange).
// positions must not be the caller's stack buffer.
func (c *Cluster) crossSlotAfter(cl *Client, name string, args [][]byte, positions []int, p *resp.Reply) {
	c.afterViewChange(cl, p, func() { c.crossSlot(cl, name, args, positions, p) })
}

// forwardAfterReplies is Forward's one-master path after a view change,
// once the client's earlier requests have their replies: by the view then.
//
//go:noinline
func (c *Cluster) forwardAfterReplies(cl *Client, slot int, args [][]byte, p *resp.Reply) {
	cl.Conn.AfterReplies(p, func() {
		v := c.view.Load()
		cl.view = v.epoch
		c.forwardTo(v.target(slot), slot, cl, args, p)
	})
}

// ownDBSize: DBSIZE, which leaves the proxy's own keys out (ownkeys.go).
func (c *Cluster) ownDBSize(name []byte, args [][]byte) bool {
	return len(c.own) > 0 && string(name) == "dbsize" && len(args) == 1
}

// slotOf is the slot of a request's keys (-1: keyless), and whether they
// are all in it; if not, positions are where its keys are (appended to
// dst).
func (c *Cluster) slotOf(name []byte, args [][]byte, dst []int) (slot int, positions []int, single bool) {
	slot = keyedSlot(name, args)
	if slot >= 0 {
		return slot, nil, true
	}
	if cmd := c.keys.LookupBytes(args[0]); cmd != nil {
		positions = cmd.Keys(dst, args)
	}
	for i, at := range positions {
		sl := keys.SlotOf(args[at])
		if i == 0 {
			slot = sl
		} else if sl != slot {
			return -1, positions, false
		}
	}
	return slot, nil, true
}

// afterViewChange runs send, if a slot changed master since the client's
// last request, once the requests routed by the old view (and their
// redirects) have their replies: a request must not overtake one the client
// sent before it. (Forward's single-slot path does the same from one
// reading of the view.)
func (c *Cluster) afterViewChange(cl *Client, p *resp.Reply, send func()) {
	if e := c.Epoch(); e != cl.view {
		if cl.view != 0 && cl.Conn != nil {
			cl.Conn.AfterReplies(p, func() {
				cl.view = c.Epoch()
				send()
			})
			return
		}
		cl.view = c.Epoch()
	}
	send()
}

// Pin returns a connection of the client's own to the master of args'
// first key's slot (keyless: the first master); a tracking client's is
// the one its tracker has there.
func (c *Cluster) Pin(cl *Client, args [][]byte) (*Pinned, error) {
	slot := c.pinSlot(args)
	if cl.track != nil {
		return cl.track.Lend(c.target(slot))
	}
	return pin(cl, c.target(slot), true)
}

// pinSlot is the slot whose master Pin gives a connection of: args' first
// key's (-1: keyless, the first master).
func (c *Cluster) pinSlot(args [][]byte) int {
	if cmd := c.keys.LookupBytes(args[0]); cmd != nil {
		var buf [4]int
		if at := cmd.Keys(buf[:0], args); len(at) > 0 {
			return keys.SlotOf(args[at[0]])
		}
	}
	return -1
}

// PinSpare is Pin with that master's idle connection, nil if it has none
// (Forwarder.PinSpare); a tracking client's is its tracker's (nil here:
// Pin lends it).
func (c *Cluster) PinSpare(cl *Client, args [][]byte) *Pinned {
	if cl.track != nil {
		return nil
	}
	return pinSpare(cl, c.target(c.pinSlot(args)), true)
}

// RoutesByKey is true: a Redis Cluster routes by slot.
func (c *Cluster) RoutesByKey() bool { return true }

// WaitReplicas runs WAIT on every master, after a write of the proxy's own
// in a slot of that master.
func (c *Cluster) WaitReplicas(cl *Client, args [][]byte, offsetKey string, p *resp.Reply) {
	masters := c.Masters()
	waitOn(cl, masters, func(i int) string { return offsetKey + keys.TagForSlot(c.SlotOn(masters[i])) }, args, p)
}

// Subscribe returns the client's subscriber: its channels and patterns on
// one connection, its shard channels on their masters (package pubsub).
func (c *Cluster) Subscribe(cl *Client) (Tunnel, error) {
	sub, err := pubsub.New(&c.pubsub, cl.ID, cl.RESP3)
	if err != nil {
		return nil, backend.ErrUnavailable
	}
	return sub, nil
}

// forwardFor serves a subscriber's request that is not its home
// connection's to answer (pubsub.Options.Forward).
func (c *Cluster) forwardFor(id int64, resp3 bool, req [][]byte, p *resp.Reply) {
	c.Forward(&Client{ID: id, RESP3: resp3}, req, p)
}

// elsewhere reports whether a subscriber's request (name: lower case) goes
// to every master, or to a master other than home (pubsub.Options.Elsewhere).
func (c *Cluster) elsewhere(name string, args [][]byte, home *Node) bool {
	if fanout.Broadcasts([]byte(name), args) {
		return true
	}
	if name == "scan" || name == "dbsize" || keyedSlot([]byte(name), args) >= 0 {
		return true
	}
	if cmd := c.keys.LookupBytes(args[0]); cmd != nil {
		for _, at := range cmd.Keys(nil, args) {
			if c.MasterForKey(args[at]) != home {
				return true
			}
		}
	}
	return false
}

// RetryAfterRefresh reports whether a request answered with reply (or
// err) did not run and may go again once the topology is read again:
// MOVED, ASK, TRYAGAIN, CLUSTERDOWN, or a master that could not be
// reached.
func (c *Cluster) RetryAfterRefresh(reply []byte, err error) bool {
	if err != nil {
		return errors.Is(err, backend.ErrUnavailable)
	}
	return fanout.Redirected(reply)
}

// Refusal is nil: a Redis Cluster's masters are not guarded (a failed
// master's slots move to another).
func (c *Cluster) Refusal() error { return nil }

// request is one request on its way through the cluster.
type request struct {
	// slot is the request's slot; -1 for a keyless request, which goes to
	// the first master.
	slot int
	// resp3 sends it on connections that speak RESP3.
	resp3 bool
	// connID picks the connection of a pool, so one client's requests to a
	// master keep their order.
	connID int64
	// encoded is the request in RESP (resp.AppendCommand): the client's
	// argument buffers are reused once the request is dispatched, so a
	// redirect must resend from a copy.
	encoded []byte
	// track, for a tracking client, carries the request on the client's
	// own connections, with CLIENT CACHING caching before it (package tracking).
	track   *tracking.Tracker[*Node]
	caching []byte
}

// newRequest is a request of cl to slot.
func newRequest(cl *Client, slot int, encoded []byte) request {
	return request{slot: slot, resp3: cl.RESP3, connID: cl.ID, encoded: encoded, track: cl.track, caching: cl.caching}
}

// deliver sends r to n, after ASKING if asking: on the client's connection
// of n's shared pool, or its own connection there while it tracks (opened
// only on a retry: see tracking.Tracker.Send). uncached: see there.
func (r *request) deliver(n *Node, asking, retry bool, p *resp.Reply) (uncached bool) {
	if r.track != nil {
		return r.track.Send(n, r.caching, r.encoded, asking, retry, p)
	}
	n.pool(r.resp3).Conn(r.connID).DoEncoded(r.encoded, asking, p)
	return false
}

// send forwards r and lands its reply, as Redis wrote it, in p (or, if no
// master could take it within RetryWindow, backend.ErrUnavailable in p.Err;
// backend.ErrLost if its connection broke).
func (c *Cluster) send(r request, p *resp.Reply) {
	f := flightPool.Get().(*flight)
	f.c, f.req, f.client, f.start, f.began = c, r, p, len(p.Buf), time.Now()
	f.send(c.target(r.slot), false)
}

// forwardTo is send for a request given as arguments, to n (the master of
// slot): it encodes them into a buffer the flight reuses.
func (c *Cluster) forwardTo(n *Node, slot int, cl *Client, args [][]byte, p *resp.Reply) {
	f := flightPool.Get().(*flight)
	f.buf = resp.AppendCommand(f.buf[:0], args)
	f.c, f.client, f.start, f.began = c, p, len(p.Buf), time.Now()
	f.req = newRequest(cl, slot, f.buf)
	f.send(n, false)
}

// target is the master of slot, or the first master for -1.
func (c *Cluster) target(slot int) *Node { return c.view.Load().target(slot) }

func (v *view) target(slot int) *Node {
	if slot < 0 {
		if len(v.masters) > 0 {
			return v.masters[0]
		}
		return nil
	}
	return v.slots[slot]
}

var flightPool sync.Pool

func init() {
	flightPool.New = func() any {
		f := new(flight)
		f.sub = resp.NewReplyFunc(f.replied)
		return f
	}
}

// flight is a Request in progress. Flights are reused: sub (whose Done is
// f.replied) and buf live as long as the flight.
type flight struct {
	c      *Cluster
	req    request
	client *resp.Reply
	sub    *resp.Reply
	buf    []byte // Forward's encoding of the request
	start  int    // len(client.Buf) before the reply
	began  time.Time
	tries  int
	pause  time.Duration
	// uncached: the request went with ASKING under CLIENT CACHING yes
	// (tracking.Tracker.InvalidateRead).
	uncached bool
}

func (f *flight) send(n *Node, asking bool) {
	f.sub.Buf, f.sub.Err = f.client.Buf, nil
	if n == nil {
		f.sub.Err = backend.ErrUnavailable
		f.replied()
		return
	}
	if f.req.deliver(n, asking, f.tries > 0, f.sub) {
		f.uncached = true
	}
}

// replied runs on a backend reader: it hands the reply over or, for a
// redirect, sends the request again from a goroutine of its own.
func (f *flight) replied() {
	reply := f.sub.Buf[f.start:]
	kind := fanout.RedirectOf(reply)
	if f.sub.Err == backend.ErrUnavailable {
		kind = fanout.Retry // not sent: the master could not be reached
	}
	if kind != fanout.NotRedirect && f.tries < maxRedirects && time.Since(f.began) < RetryWindow {
		f.tries++
		f.client.Buf = f.sub.Buf[:f.start]
		slot, addr := fanout.ParseRedirect(reply)
		if (kind == fanout.Moved || kind == fanout.Ask) && slot >= 0 {
			// To a master already connected: resend from here, so that a
			// client's requests redirected together keep their order (this
			// reader sees their replies in order).
			if n, err := f.c.nodeIfKnown(addr); err == nil {
				// Resend before the view changes: a request the client
				// sends later, routed by the new view, queues behind it.
				// (f may be done and reused once sent: keep what we need.)
				c, isMoved := f.c, kind == fanout.Moved
				f.send(n, kind == fanout.Ask)
				if isMoved {
					c.Moved(slot, addr)
				}
				return
			}
		}
		go f.redirect(kind, slot, addr)
		return
	}
	f.client.Buf, f.client.Err = f.sub.Buf, f.sub.Err
	p := f.client
	var uncachedBy *tracking.Tracker[*Node]
	var uncachedReq []byte
	if f.uncached && f.sub.Err == nil {
		uncachedBy, uncachedReq = f.req.track, bytes.Clone(f.req.encoded)
	}
	f.c, f.req, f.client, f.sub.Buf, f.sub.Err, f.tries, f.pause, f.uncached = nil, request{}, nil, nil, nil, 0, 0, false
	if cap(f.buf) > 64<<10 {
		f.buf = nil
	}
	flightPool.Put(f)
	p.Done()
	if uncachedBy != nil {
		uncachedBy.InvalidateRead(uncachedReq) // after the reply (protocol's push.go)
	}
}

func (f *flight) redirect(kind fanout.Redirect, slot int, addr string) {
	if slot < 0 {
		kind = fanout.Retry
	}
	switch kind {
	case fanout.Moved:
		f.c.Moved(slot, addr)
		if n := f.c.MasterForSlot(slot); n != nil && n.Addr == addr {
			f.send(n, false)
			return
		}
		// A master the proxy has not connected to yet: wait for the refresh.
	case fanout.Ask:
		if n, err := f.c.nodeIfKnown(addr); err == nil {
			f.send(n, true)
			return
		}
		f.c.Refresh()
	default: // TRYAGAIN, CLUSTERDOWN, unreachable
		f.c.Refresh()
	}
	f.pause = min(max(2*f.pause, 10*time.Millisecond), 250*time.Millisecond)
	time.Sleep(f.pause)
	f.send(f.c.target(f.req.slot), false)
}

// nodeIfKnown returns the connected master at addr.
func (c *Cluster) nodeIfKnown(addr string) (*Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[addr]; n != nil {
		return n, nil
	}
	return nil, ErrUnavailable
}
