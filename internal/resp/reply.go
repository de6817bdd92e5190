package resp

import (
	"sync"

	"github.com/tidwall/redcon"
)

// Reply is the reply to one request, filled in by whoever serves it and
// read by whoever waits for it (see the package doc).
//
// The server either appends one reply's RESP bytes to Buf, or sets Err,
// and then calls Done exactly once, from any goroutine. After Done the
// server must touch neither Buf nor the Reply: its Completer owns both (a
// client connection reuses them for a later request).
type Reply struct {
	Buf []byte
	// Err, if set, is why the request got no reply from Redis (see the
	// package doc); Buf then holds no reply of this request's.
	Err error
	to  Completer
}

// A Completer is told that a Reply is complete. Complete runs on the
// goroutine that calls Done (a backend reader, a lock worker): it must not
// block.
type Completer interface {
	Complete(r *Reply)
}

// Done marks the reply complete and hands it to its Completer.
func (r *Reply) Done() { r.to.Complete(r) }

// The replies the proxy answers with itself most often; each completes r.

// DoneError answers the error reply msg ("CODE text").
func (r *Reply) DoneError(msg string) {
	r.Buf = redcon.AppendError(r.Buf, msg)
	r.Done()
}

// DoneErr answers err, an error value that becomes the client's reply
// where it is written (protocol).
func (r *Reply) DoneErr(err error) {
	r.Err = err
	r.Done()
}

// DoneOK answers +OK.
func (r *Reply) DoneOK() {
	r.Buf = append(r.Buf, "+OK\r\n"...)
	r.Done()
}

// DoneInt answers the integer n.
func (r *Reply) DoneInt(n int64) {
	r.Buf = redcon.AppendInt(r.Buf, n)
	r.Done()
}

var (
	null2 = []byte("$-1\r\n")
	null3 = []byte("_\r\n")
)

// Null is the null reply of RESP3 (resp3) or RESP2; not to be changed.
func Null(resp3 bool) []byte {
	if resp3 {
		return null3
	}
	return null2
}

// NewReplyTo returns a Reply whose Done calls c.Complete: the slot of a
// Completer that keeps and reuses it (a client connection's batch).
func NewReplyTo(c Completer) *Reply { return &Reply{to: c} }

// ReplyTo is NewReplyTo's Reply as a value, for a Completer that keeps its
// Reply in itself (one allocation for both).
func ReplyTo(c Completer) Reply { return Reply{to: c} }

// NewReply returns a Reply whose Done calls wg.Done, for requests the proxy
// makes on its own behalf (its lock scripts) rather than a client's. The
// caller adds 1 to wg before handing it out.
func NewReply(wg *sync.WaitGroup) *Reply { return &Reply{to: (*waitGroup)(wg)} }

// NewReplyFunc returns a Reply whose Done calls then, on the goroutine that
// completes it (a backend reader: then must not block). It is for a reply
// looked at before the client gets it (Redis Cluster's MOVED and ASK, or
// the parts of a split request).
func NewReplyFunc(then func()) *Reply { return &Reply{to: funcCompleter(then)} }

type waitGroup sync.WaitGroup

func (wg *waitGroup) Complete(*Reply) { (*sync.WaitGroup)(wg).Done() }

type funcCompleter func()

func (f funcCompleter) Complete(*Reply) { f() }
