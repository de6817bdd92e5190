package commands

import (
	"context"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/cluster"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// info is INFO: Redis's own sections, with the proxy's "# fenceproxy" and
// "# locks" sections after them (INFO, INFO all/everything/default, INFO
// fenceproxy, INFO locks).
func (h *Handler) info(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	var sections []string
	ours, onlyOurs := len(args) == 1, len(args) > 1
	lockSec := len(args) == 1
	for _, a := range args[1:] {
		sec := strings.ToLower(string(a))
		switch sec {
		case "fenceproxy", "tier":
			ours = true
			continue
		case "locks":
			lockSec = true
			continue
		case "all", "everything", "default":
			ours, lockSec = true, true
		}
		onlyOurs = false
		sections = append(sections, sec)
	}
	h.runner.Go(func() {
		var text string
		if !onlyOurs {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var err error
			// A Redis Cluster's masters' INFO merged (cluster.Info).
			text, err = cluster.Info(ctx, h.opts.Backend, sections...)
			cancel()
			if err != nil {
				replyErr(p, backend.ErrUnavailable)
				return
			}
		}
		if ours && h.opts.Info != nil {
			if text != "" && !strings.HasSuffix(text, "\r\n\r\n") {
				text = strings.TrimRight(text, "\r\n") + "\r\n\r\n"
			}
			text += "# fenceproxy\r\n" + h.opts.Info()
		}
		if lockSec && h.opts.Locks != nil {
			if text != "" && !strings.HasSuffix(text, "\r\n\r\n") {
				text = strings.TrimRight(text, "\r\n") + "\r\n\r\n"
			}
			text += "# locks\r\n" + h.locksInfo()
		}
		p.Buf = redcon.AppendBulkString(p.Buf, text)
		p.Done()
	})
}
