package commands

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/cluster"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// clusterView answers CLUSTER in front of a Redis Cluster as a cluster of
// one node, the proxy at the address the client reached (cluster's
// OneNodeView has the why): INFO, NODES, SLOTS, SHARDS, MYID, KEYSLOT,
// LINKS, REPLICAS ...; the subcommands that would change the cluster are
// refused (cluster.ClusterRefusal). The rest (COUNTKEYSINSLOT and
// GETKEYSINSLOT go to their slot's master), and every CLUSTER command in
// front of a standalone Redis (which answers that it has no cluster
// support), is forwarded.
func (h *Handler) clusterView(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	b := h.opts.Backend
	if b.Mode() == "cluster" {
		if why := cluster.ClusterRefusal(strings.ToLower(string(args[1]))); why != "" {
			replyError(p, why)
			return
		}
		covered := true
		if cv, ok := b.(interface{ Covered() bool }); ok {
			covered = cv.Covered()
		}
		if reply, ok := cluster.OneNodeView(args, c.LocalAddr, sessionOf(c).backend.RESP3, covered); ok {
			p.Buf = append(p.Buf, reply...)
			p.Done()
			return
		}
	}
	h.forward(c, args, p)
}
