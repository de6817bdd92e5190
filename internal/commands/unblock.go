package commands

import (
	"strings"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// CLIENT UNBLOCK names a client of the proxy's (its CLIENT ID): a blocking
// command of that client waits on a connection of its own to Redis
// (pinned.go), which Redis knows by another id. blockedClients maps one to
// the other while the command waits, and the UNBLOCK goes to Redis for
// that connection (upstream.Pinned.Unblock).

// blockedClients are the clients whose blocking command waits on their
// pinned connection, by the proxy's client id. It is shared by every
// connection's goroutine (CLIENT UNBLOCK comes from another client);
// lock order: blockedClients.mu alone, no I/O under it.
type blockedClients struct {
	mu sync.Mutex
	by map[int64]*blockedClient
}

type blockedClient struct {
	pinned *upstream.Pinned
	// unblocked: an UNBLOCK was sent for it. Its connection is then not
	// given to another client: the UNBLOCK may still be on its way.
	unblocked bool
}

// add records that client id's blocking command waits on pinned.
func (b *blockedClients) add(id int64, pinned *upstream.Pinned) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil {
		b.by = map[int64]*blockedClient{}
	}
	b.by[id] = &blockedClient{pinned: pinned}
}

// remove forgets client id's blocking command (its reply is in, or the
// client went away) and reports whether it may have been sent an UNBLOCK.
func (b *blockedClients) remove(id int64) (unblocked bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bc := b.by[id]
	if bc == nil {
		return false
	}
	delete(b.by, id)
	return bc.unblocked
}

// take marks client id's blocking command as being unblocked and returns
// its connection, or nil if it has none waiting.
func (b *blockedClients) take(id int64) *upstream.Pinned {
	b.mu.Lock()
	defer b.mu.Unlock()
	bc := b.by[id]
	if bc == nil {
		return nil
	}
	bc.unblocked = true
	return bc.pinned
}

// unblocked forgets c's blocking command once its batch is done (or c
// went away) and reports whether an UNBLOCK may have been sent for it. Only
// a client that sent one takes the shared lock.
func (h *Handler) unblocked(c *protocol.Conn, s *session) bool {
	if !s.tx.blocked {
		return false
	}
	s.tx.blocked = false
	return h.blocked.remove(c.ID)
}

// clientUnblock serves CLIENT UNBLOCK id [TIMEOUT|ERROR] for the proxy's
// clients: :1 if that client's blocking command was ended, :0 if it had
// none waiting (or no such client), as Redis answers.
func (h *Handler) clientUnblock(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	id, ok := parseInt(args[2])
	if !ok {
		replyError(p, "ERR value is not an integer or out of range")
		return
	}
	var mode []byte
	if len(args) == 4 {
		switch strings.ToLower(string(args[3])) {
		case "timeout", "error":
			mode = args[3]
		default:
			replyError(p, "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
			return
		}
	}
	pinned := h.blocked.take(id)
	if pinned == nil {
		replyInt(p, 0)
		return
	}
	pinned.Unblock(mode, p)
}
