package backend

import "sync/atomic"

// Gate stops every request to one node at once, without closing its
// connections: for a node that must not be written to for now (it reports
// itself a replica, or Sentinel names another master). Every Conn whose
// Options name the Gate answers each request with the Gate's reply while it
// is closed, and sends nothing.
//
// A Gate is checked when a request is queued; a request already queued or
// written goes on as before.
type Gate struct {
	reply atomic.Pointer[[]byte] // nil while open
}

// Close makes every request get reply, an error reply without its "-" and
// CRLF, e.g. "READONLY fenceproxy: ...".
func (g *Gate) Close(reply string) {
	b := []byte("-" + reply + "\r\n")
	g.reply.Store(&b)
}

// Open lets requests through again.
func (g *Gate) Open() { g.reply.Store(nil) }

// Reason is the reply of a closed Gate (as given to Close), "" if it is open.
func (g *Gate) Reason() string {
	if b := g.reply.Load(); b != nil {
		return string((*b)[1 : len(*b)-2])
	}
	return ""
}

// refusal is the reply to give instead of sending, nil if the gate is open
// (or there is none).
func (g *Gate) refusal() []byte {
	if g == nil {
		return nil
	}
	if b := g.reply.Load(); b != nil {
		return *b
	}
	return nil
}
