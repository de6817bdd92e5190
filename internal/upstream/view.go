package upstream

import (
	"crypto/sha1"
	"encoding/hex"
	"net"
	"strconv"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// A client that probes the server it talks to with CLUSTER INFO, NODES,
// SLOTS, SHARDS or MYID, in front of a Redis Cluster, is told of a cluster
// of one node: the proxy itself, at the address the client reached it by,
// master of all 16384 slots. So a client that switches to cluster mode when
// it finds one (INFO's cluster_enabled:1 is the masters') keeps sending
// everything to the proxy, which routes it; the masters' own addresses,
// which the client could not use without the proxy, are never shown.

//
// The rest of CLUSTER follows from the same view: KEYSLOT is answered by the
// proxy (a slot is a hash of the key, the same on every node);
// COUNTKEYSINSLOT and GETKEYSINSLOT go to the slot's master (keyedSlot);
// REPLICAS, SLAVES and COUNT-FAILURE-REPORTS know only the one node, with
// no replicas and no failure reports, and LINKS no other node to link to.
// The subcommands that change the cluster (adminSubcommands) are refused:
// run on one master they would act on that node alone, behind a view that
// shows none of them, so an operator runs them on the nodes themselves.

// adminSubcommands are CLUSTER's subcommands that change the cluster or a
// node's part in it: refused through the proxy (ClusterRefusal).
var adminSubcommands = map[string]bool{
	"addslots": true, "addslotsrange": true, "delslots": true, "delslotsrange": true,
	"flushslots": true, "setslot": true, "meet": true, "forget": true, "replicate": true,
	"failover": true, "reset": true, "saveconfig": true, "bumpepoch": true, "set-config-epoch": true,
}

// ClusterRefusal is the error (no "-", no CRLF) for CLUSTER sub (lower
// case) in front of a Redis Cluster, "" if it is served.
func ClusterRefusal(sub string) string {
	if !adminSubcommands[sub] {
		return ""
	}
	return "ERR fenceproxy: CLUSTER " + strings.ToUpper(sub) + " is not served through fenceproxy, which shows its clients " +
		"one node in front of the whole Redis Cluster; run it on the cluster's own nodes (redis-cli -h NODE -p PORT)"
}

// OneNodeView answers CLUSTER (args: the request, args[1] its subcommand)
// for a client that reached the proxy at laddr, in RESP3 if resp3; ok is
// false for a request it does not answer (forwarded as any other: to the
// first master, or to the slot's master for COUNTKEYSINSLOT and
// GETKEYSINSLOT). covered says whether the proxy has a master for every
// slot (cluster_state ok) or not (fail).
func OneNodeView(args [][]byte, laddr string, resp3 bool, covered bool) (reply []byte, ok bool) {
	if len(args) < 2 {
		return nil, false
	}
	sub := strings.ToLower(string(args[1]))
	host, portText, err := net.SplitHostPort(laddr)
	if err != nil {
		host, portText = laddr, "0"
	}
	port, _ := strconv.Atoi(portText)
	id := ViewNodeID(laddr)
	if len(args) == 3 {
		switch sub {
		case "keyslot":
			return redcon.AppendInt(nil, int64(keys.SlotOf(args[2]))), true
		case "replicas", "slaves", "count-failure-reports":
			switch {
			case string(args[2]) != id:
				return redcon.AppendError(nil, "ERR Unknown node "+string(args[2])), true
			case sub == "count-failure-reports":
				return redcon.AppendInt(nil, 0), true
			}
			return redcon.AppendArray(nil, 0), true
		}
		return nil, false
	}
	if len(args) != 2 {
		return nil, false
	}
	var b []byte
	switch sub {
	case "links":
		b = redcon.AppendArray(b, 0)
	case "myid":
		b = redcon.AppendBulkString(b, id)
	case "info":
		state := "ok"
		if !covered {
			state = "fail"
		}
		text := strings.Join([]string{
			"cluster_state:" + state, "cluster_slots_assigned:16384", "cluster_slots_ok:16384",
			"cluster_slots_pfail:0", "cluster_slots_fail:0", "cluster_known_nodes:1", "cluster_size:1",
			"cluster_current_epoch:1", "cluster_my_epoch:1", "cluster_stats_messages_sent:0",
			"cluster_stats_messages_received:0", "total_cluster_links_buffer_limit_exceeded:0",
		}, "\r\n") + "\r\n"
		b = appendText(b, text, resp3)
	case "nodes":
		line := id + " " + net.JoinHostPort(host, portText) + "@0 myself,master - 0 0 1 connected 0-16383\n"
		b = appendText(b, line, resp3)
	case "slots":
		b = redcon.AppendArray(b, 1)
		b = redcon.AppendArray(b, 3)
		b = redcon.AppendInt(b, 0)
		b = redcon.AppendInt(b, SlotCount-1)
		b = redcon.AppendArray(b, 4)
		b = redcon.AppendBulkString(b, host)
		b = redcon.AppendInt(b, int64(port))
		b = redcon.AppendBulkString(b, id)
		b = appendMapHeader(b, 0, resp3) // no hostname
	case "shards":
		b = redcon.AppendArray(b, 1)
		b = appendMapHeader(b, 2, resp3)
		b = redcon.AppendBulkString(b, "slots")
		b = redcon.AppendArray(b, 2)
		b = redcon.AppendInt(b, 0)
		b = redcon.AppendInt(b, SlotCount-1)
		b = redcon.AppendBulkString(b, "nodes")
		b = redcon.AppendArray(b, 1)
		b = appendMapHeader(b, 7, resp3)
		b = redcon.AppendBulkString(b, "id")
		b = redcon.AppendBulkString(b, id)
		b = redcon.AppendBulkString(b, "port")
		b = redcon.AppendInt(b, int64(port))
		b = redcon.AppendBulkString(b, "ip")
		b = redcon.AppendBulkString(b, host)
		b = redcon.AppendBulkString(b, "endpoint")
		b = redcon.AppendBulkString(b, host)
		b = redcon.AppendBulkString(b, "role")
		b = redcon.AppendBulkString(b, "master")
		b = redcon.AppendBulkString(b, "replication-offset")
		b = redcon.AppendInt(b, 0)
		b = redcon.AppendBulkString(b, "health")
		b = redcon.AppendBulkString(b, "online")
	default:
		return nil, false
	}
	return b, true
}

// ViewNodeID is the node id the proxy gives itself in the one-node view:
// 40 hex digits, the same for every client that reaches it at laddr.
func ViewNodeID(laddr string) string {
	sum := sha1.Sum([]byte("fenceproxy " + laddr))
	return hex.EncodeToString(sum[:])
}

// appendText appends a text reply: a bulk string, or in RESP3 a verbatim
// string, as Redis answers CLUSTER INFO and NODES.
func appendText(b []byte, text string, resp3 bool) []byte {
	if !resp3 {
		return redcon.AppendBulkString(b, text)
	}
	b = append(b, '=')
	b = strconv.AppendInt(b, int64(len(text)+4), 10)
	b = append(b, "\r\ntxt:"...)
	b = append(b, text...)
	return append(b, "\r\n"...)
}

// appendMapHeader starts a map of n pairs: RESP3's %, RESP2's flat array.
func appendMapHeader(b []byte, n int, resp3 bool) []byte {
	if !resp3 {
		return redcon.AppendArray(b, 2*n)
	}
	b = append(b, '%')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n"...)
}

// Covered reports whether the proxy knows a reachable master for every
// slot (CLUSTER INFO's cluster_state).
func (c *Cluster) Covered() bool {
	v := c.view.Load()
	for _, n := range v.slots {
		if n == nil {
			return false
		}
	}
	return true
}

// ClusterView answers CLUSTER in front of a Redis Cluster (Forwarder): a
// refusal for a subcommand that would change the cluster, else the one-node
// view where it has an answer.
func (c *Cluster) ClusterView(cl *Client, args [][]byte, laddr string, p *resp.Reply) bool {
	if why := ClusterRefusal(strings.ToLower(string(args[1]))); why != "" {
		p.Buf = redcon.AppendError(p.Buf, why)
		p.Done()
		return true
	}
	reply, ok := OneNodeView(args, laddr, cl.RESP3, c.Covered())
	if ok {
		p.Buf = append(p.Buf, reply...)
		p.Done()
	}
	return ok
}
