package upstream

import (
	"io"
	"net"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// rawTunnel is a pub/sub client's connection of its own to a standalone
// master, copied to the client as it is: one Redis node gives every
// answer and relays every message. (In front of a Redis Cluster, shard
// channels live on their slots' masters: see package pubsub.)
type rawTunnel struct{ net.Conn }

// Start copies what Redis writes to client until either ends.
func (t rawTunnel) Start(client net.Conn) {
	go func() {
		io.Copy(client, t.Conn)
		// Redis closed (QUIT) or failed: the client must see the end too.
		client.Close()
	}()
}

func (t rawTunnel) Send(args [][]byte) {
	if _, err := t.Write(resp.AppendCommand(nil, args)); err != nil {
		t.Conn.Close() // the copier ends and closes the client
	}
}

func (t rawTunnel) Close() { t.Conn.Close() }

// MayDial: a standalone master's tunnel is its one connection.
func (rawTunnel) MayDial([][]byte) bool { return false }
