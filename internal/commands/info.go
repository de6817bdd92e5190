package commands

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// info is INFO: Redis's own sections, with the proxy's "# fenceproxy" and
// "# locks" sections after them (INFO, INFO all/everything/default, INFO
// fenceproxy, INFO locks). The Clients section counts the proxy's clients
// (connected_clients), as CLIENT LIST lists them.
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
	h.locks.Go(func() {
		var text string
		if !onlyOurs {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var err error
			// A Redis Cluster's masters' INFO merged (upstream.Info).
			text, err = upstream.Info(ctx, h.opts.Backend, sections...)
			cancel()
			if err != nil {
				replyErr(p, upstream.ErrUnavailable)
				return
			}
		}
		text = h.ownClients(c, text)
		if ours && h.opts.Info != nil {
			if text != "" && !strings.HasSuffix(text, "\r\n\r\n") {
				text = strings.TrimRight(text, "\r\n") + "\r\n\r\n"
			}
			text += "# fenceproxy\r\n" + h.opts.Info()
		}
		if lockSec && h.locks.On() {
			if text != "" && !strings.HasSuffix(text, "\r\n\r\n") {
				text = strings.TrimRight(text, "\r\n") + "\r\n\r\n"
			}
			text += "# locks\r\n" + h.locks.Section(lockCounts(h.opts.Metrics))
		}
		p.Buf = redcon.AppendBulkString(p.Buf, text)
		p.Done()
	})
}

// ownClients puts the proxy's client count in INFO's connected_clients:
// Redis's counts the proxy's connections, which carry many clients'
// requests (blocked_clients and tracking_clients stay Redis's: each
// such client has a connection of its own).
func (h *Handler) ownClients(c *protocol.Conn, text string) string {
	const field = "\r\nconnected_clients:"
	i := strings.Index(text, field)
	if i < 0 {
		return text
	}
	start := i + len(field)
	end := strings.Index(text[start:], "\r\n")
	if end < 0 {
		return text
	}
	return text[:start] + strconv.Itoa(c.Server().Clients()) + text[start+end:]
}
