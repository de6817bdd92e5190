package commands

import (
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// clusterView is CLUSTER: the backend answers what its topology calls for
// (Forwarder.ClusterView: in front of a Redis Cluster, a cluster of one
// node, the proxy at the address the client reached, and a refusal of the
// subcommands that would change the cluster); the rest (COUNTKEYSINSLOT
// and GETKEYSINSLOT go to their slot's master), and every CLUSTER command
// in front of a standalone Redis (which answers that it has no cluster
// support), is forwarded.
func (h *Handler) clusterView(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if h.opts.Backend.ClusterView(&sessionOf(c).backend, args, c.LocalAddr, p) {
		return
	}
	h.forward(c, args, p)
}
