package pubsub

import (
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// Ordinary commands on a subscriber's connection. A client that used
// pub/sub keeps its connection's tunnel (package commands' pubsub.go), and its
// later commands go home: a RESP2 client with no subscription left (Redis's
// suite sends UNSUBSCRIBE, then SET foo and CONFIG SET, on its one
// connection) or a RESP3 client, which may send anything while subscribed.
// Home is one master: a key of another master's slot gets -MOVED (or -ASK)
// there, and a command about the whole cluster (CONFIG SET, FLUSHALL,
// DBSIZE ...) would reach that master alone. So the subscriber keeps the
// requests it sent home that get one reply each, in order (asking). A
// request for another master, or for every master, is not sent home: a
// PING holds its turn there, and when the PING's reply comes, the request
// goes by the ordinary path (Options.Forward) and its reply takes the PING's place
// in the stream; a reply that is a redirect is replaced the same way.
// Home's reader waits for it, so the replies keep the order of the
// requests, and no MOVED or ASK reaches the client. A RESP2 client that is
// still subscribed gets Redis's own refusal from home, as without the
// proxy.

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

// replyMovedTimeout answers a redirected request whose master did not
// answer within movedWait. It may have run (sent, its reply late), so it
// is -ERR, never -TRYAGAIN, which clients retry by themselves: an INCR
// would run twice.
const replyMovedTimeout = "-ERR fenceproxy: the key's Redis Cluster master did not answer in time; the command may or may not have run\r\n"

// movedWait bounds how long a redirected request waits for its key's
// master, beyond RetryWindow (the reply itself).
const movedWait = 5 * time.Second

// asked is a request sent home that gets one reply; placeholder: a PING
// went in its stead.
type asked struct {
	req         [][]byte
	placeholder bool
}

// elsewhere reports whether a request (name: lower case) is not home's to
// answer: it goes to every master, or to another master than home's, and
// the client may send it now (RESP3, or RESP2 with no subscription left).
func (s *Subscriber[N]) elsewhere(name string, args [][]byte) bool {
	s.mu.Lock()
	subscribed := !s.resp3 && (s.homeSubs > 0 || len(s.channels) > 0)
	s.mu.Unlock()
	if subscribed || name == "ping" || name == "quit" || name == "reset" || name == "hello" {
		return false
	}
	return s.opts.Elsewhere(name, args, s.homeNode)
}

// noteSubscriptions records home's count of the client's subscriptions
// from an (un)subscribe confirmation.
func (s *Subscriber[N]) noteSubscriptions(msg []byte) {
	elems, ok := resp.Elements(msg)
	if !ok || len(elems) != 3 {
		return
	}
	if n, ok := resp.Integer(elems[2]); ok {
		s.mu.Lock()
		s.homeSubs = n
		s.mu.Unlock()
	}
}

// homeReply takes the oldest request asking for the reply msg; if msg is
// its placeholder's, or redirects it, the request goes by Forward and its
// reply is what the client gets.
func (s *Subscriber[N]) homeReply(msg []byte) []byte {
	s.mu.Lock()
	var a asked
	if len(s.asking) > 0 {
		a = s.asking[0]
		s.asking[0] = asked{}
		s.asking = s.asking[1:]
	}
	resp3 := s.resp3
	s.mu.Unlock()
	req := a.req
	if k := fanout.RedirectOf(msg); !a.placeholder && k != fanout.Moved && k != fanout.Ask {
		return msg
	} else if req == nil {
		return []byte(replyOtherMasterPubsub)
	}
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	s.opts.Forward(s.id, resp3, req, p)
	select {
	case <-done:
	case <-time.After(s.opts.RetryWindow + movedWait):
		return []byte(replyMovedTimeout)
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
