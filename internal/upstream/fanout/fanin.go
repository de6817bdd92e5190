package fanout

import (
	"sync/atomic"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// FanIn returns n Replies for the parts of one client request sent to
// several masters; when the last of them is done, done gets them in part
// order.
func FanIn(n int, done func(parts []*resp.Reply)) []*resp.Reply {
	parts := make([]*resp.Reply, n)
	var left atomic.Int32
	left.Store(int32(n))
	for i := range parts {
		parts[i] = resp.NewReplyFunc(func() {
			if left.Add(-1) == 0 {
				done(parts)
			}
		})
	}
	return parts
}

// Into answers p with the merge of the parts' replies, or, if a part
// got none (its master could not be reached, or the connection broke with
// it), with the first such part's error: the request did not run whole.
func Into(p *resp.Reply, parts []*resp.Reply, order [][2]int, m Merge) {
	replies := make([][]byte, len(parts))
	for i, part := range parts {
		if part.Err != nil {
			p.Err = part.Err
			p.Done()
			return
		}
		replies[i] = part.Buf
	}
	p.Buf = m(replies, order, p.Buf)
	p.Done()
}
