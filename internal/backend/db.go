package backend

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// selectDB makes nc use Options.DB, before it carries anything. Redis's
// own refusal (an index out of range) comes back as the error, a
// resp.Error, so a caller can give it to the client as Redis's answer.
func (c *Conn) selectDB(nc net.Conn) error {
	if c.opts.DB == 0 {
		return nil
	}
	nc.SetDeadline(time.Now().Add(c.opts.DialTimeout))
	defer nc.SetDeadline(time.Time{})
	req := resp.AppendCommand(nil, [][]byte{[]byte("SELECT"), []byte(strconv.Itoa(c.opts.DB))})
	if _, err := nc.Write(req); err != nil {
		return err
	}
	// Only this reply is outstanding, so the reader takes nothing beyond it.
	reply, err := resp.AppendReply(nil, bufio.NewReaderSize(nc, 512))
	if err != nil {
		return err
	}
	if re, ok := resp.ErrorReply(reply); ok {
		return re
	}
	if string(reply) != "+OK\r\n" {
		return fmt.Errorf("SELECT answered %q", trimCRLF(reply))
	}
	return nil
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
