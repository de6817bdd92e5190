package upstream

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// CONFIG SET in front of a Redis Cluster goes to every master
// (broadcast.go), so that every master behaves alike (notify-keyspace-events
// above all: a master not told publishes no keyspace notifications). A
// master that joins later, a replica promoted by a failover or a master
// added to the cluster, was never told: the proxy remembers what its
// clients set and sets it there too when it first connects to it.
type configs struct {
	mu  sync.Mutex
	set map[string]string // parameter (lower case) -> value, as last set
}

// configSet wraps p so that, once every master accepted CONFIG SET args
// (+OK), its parameters are remembered. args are copied: the client's
// buffers are reused once the request is sent.
func (c *Cluster) configSet(args [][]byte, p *resp.Reply) *resp.Reply {
	if len(args) < 4 || len(args)%2 != 0 {
		return p // Redis's own arity or syntax error
	}
	pairs := make(map[string]string, (len(args)-2)/2)
	for i := 2; i+1 < len(args); i += 2 {
		pairs[string(bytes.ToLower(args[i]))] = string(args[i+1])
	}
	start := len(p.Buf)
	var sub *resp.Reply
	sub = resp.NewReplyFunc(func() {
		if sub.Err == nil && bytes.Equal(sub.Buf[start:], []byte("+OK\r\n")) {
			c.configs.mu.Lock()
			if c.configs.set == nil {
				c.configs.set = map[string]string{}
			}
			maps.Copy(c.configs.set, pairs)
			c.configs.mu.Unlock()
		}
		p.Buf, p.Err = sub.Buf, sub.Err
		p.Done()
	})
	sub.Buf = p.Buf
	return sub
}

// applyConfigs sets on n, a master the proxy just connected to, what its
// clients set with CONFIG SET on the masters before it.
func (c *Cluster) applyConfigs(ctx context.Context, n *Node) {
	c.configs.mu.Lock()
	args := []any{"CONFIG", "SET"}
	for _, k := range slices.Sorted(maps.Keys(c.configs.set)) {
		args = append(args, k, c.configs.set[k])
	}
	c.configs.mu.Unlock()
	if len(args) == 2 {
		return
	}
	if err := n.Client.Do(ctx, args...).Err(); err != nil {
		c.log.Warn("could not set on a new Redis Cluster master what clients set with CONFIG SET on the others", "addr", n.Addr, "err", err)
	}
}
