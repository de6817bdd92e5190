package upstream

import (
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// crossSlot serves a request whose keys (at positions) span slots: split
// into a request per slot where fanout's tables allow, else refused as
// Redis Cluster refuses it.
func (c *Cluster) crossSlot(cl *Client, name string, args [][]byte, positions []int, p *resp.Reply) {
	split, refusal := fanout.Cut(name, args, positions)
	if refusal != "" {
		p.Buf = append(p.Buf, refusal...)
		p.Done()
		return
	}
	if cl.track != nil {
		p = cl.track.Merged(p)
	}
	parts := fanout.FanIn(len(split.Parts), func(replies []*resp.Reply) { fanout.Into(p, replies, split.Order, split.Merge) })
	for i, slot := range split.Slots {
		c.send(newRequest(cl, slot, split.Parts[i]), parts[i])
	}
}
