package cluster

import (
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Keyed commands on a subscriber's home connection. A client that used
// pub/sub keeps its connection's tunnel (commands' pubsub.go), and its
// later commands go home: a RESP2 client with no subscription left (Redis's
// suite sends UNSUBSCRIBE, then SET foo, on its one connection) or a RESP3
// client, which may send anything while subscribed. Home is one master; a
// key of another master's slot gets -MOVED (or -ASK) there. So the
// subscriber keeps the requests it sent home that get one reply each, in
// order (asking), and when a reply is a redirect, the request it answers
// goes to its key's master by the ordinary path (Forward) and that reply
// takes its place in the stream. Home's reader waits for it, so the replies
// keep the order of the requests. No MOVED or ASK reaches the client.

// pushKinds are the kinds of message Redis sends a subscribed client that
// are not the reply to one request: messages and (un)subscribe
// confirmations, of which one (un)subscription may bring many.
var pushKinds = map[string]bool{
	"message": true, "pmessage": true, "smessage": true,
	"subscribe": true, "psubscribe": true, "ssubscribe": true,
	"unsubscribe": true, "punsubscribe": true, "sunsubscribe": true,
}

// pubsubCommand reports whether a command (lower case) is answered by
// (un)subscribe confirmations rather than one reply.
func pubsubCommand(name string) bool { return pushKinds[name] }

// replyOtherMasterPubsub replaces a redirect the subscriber cannot match
// with its request (never expected): never a MOVED to the client.
const replyOtherMasterPubsub = "-CROSSSLOT fenceproxy: this key is on another Redis Cluster master than this connection's pub/sub; send commands on keys from a connection that has not used pub/sub\r\n"

// movedWait bounds how long a redirected request waits for its key's
// master (RetryWindow, and the reply itself).
const movedWait = RetryWindow + 5*time.Second

// homeReply takes the oldest request asking for the reply msg; if msg
// redirects it, the request goes to its key's master and that master's
// reply is what the client gets.
func (s *subscriber) homeReply(msg []byte) []byte {
	s.mu.Lock()
	var req [][]byte
	if len(s.asking) > 0 {
		req = s.asking[0]
		s.asking[0] = nil
		s.asking = s.asking[1:]
	}
	resp3 := s.resp3
	s.mu.Unlock()
	if k := redirectKind(msg); k != moved && k != ask {
		return msg
	} else if req == nil {
		return []byte(replyOtherMasterPubsub)
	}
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	s.c.Forward(&Client{ID: s.id, RESP3: resp3}, req, p)
	select {
	case <-done:
	case <-time.After(movedWait):
		return []byte("-TRYAGAIN fenceproxy: the key's Redis Cluster master did not answer in time; the command may or may not have run\r\n")
	}
	if p.Err != nil {
		if coded, ok := p.Err.(resp.CodedError); ok {
			code, text := coded.RESPError()
			return resp.AppendError(nil, code, text)
		}
		return []byte("-ERR fenceproxy: lost the connection to Redis; the command may or may not have run\r\n")
	}
	return p.Buf
}

// cloneArgs copies a request whose buffers the caller reuses.
func cloneArgs(args [][]byte) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = append([]byte(nil), a...)
	}
	return out
}
