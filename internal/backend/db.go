package backend

import (
	"bufio"
	"net"
	"strconv"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// selectDB makes nc use Options.DB, before it carries anything. Redis's
// own refusal (an index out of range) comes back as the error, a
// resp.Error, so a caller can give it to the client as Redis's answer.
func (c *Conn) selectDB(nc net.Conn) error {
	if c.opts.DB == 0 {
		return nil
	}
	return c.expectOK(nc, "SELECT", strconv.Itoa(c.opts.DB))
}

// readPush reads one push message and hands it to Options.OnPush.
func (c *Conn) readPush(rd *bufio.Reader) error {
	frame, err := resp.AppendReply(nil, rd)
	if err != nil {
		return err
	}
	c.opts.OnPush(frame)
	return nil
}
