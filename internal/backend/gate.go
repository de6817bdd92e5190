package backend

import (
	"sync/atomic"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Gate stops every request to one node at once, without closing its
// connections: for a node that must not be written to for now (it reports
// itself a replica, or Sentinel names another master). Every Conn whose
// Options name the Gate completes each request with the Gate's refusal as
// its Err while it is closed, and sends nothing.
//
// A Gate is checked when a request is queued; a request already queued or
// written goes on as before.
type Gate struct {
	refusal atomic.Pointer[refusal] // nil while open
}

// refusal holds a closed Gate's error, made once so that refusing a
// request allocates nothing.
type refusal struct{ err error }

// Close makes every request get reply, an error reply's text without its
// "-" and CRLF, e.g. "READONLY fenceproxy: ...", as a resp.Error.
func (g *Gate) Close(reply string) {
	g.refusal.Store(&refusal{resp.NewError(reply)})
}

// Open lets requests through again.
func (g *Gate) Open() { g.refusal.Store(nil) }

// Refusal is the error every request gets while the Gate is closed (a
// resp.Error made from Close's reply), nil while it is open or if there is
// no Gate.
func (g *Gate) Refusal() error {
	if g == nil {
		return nil
	}
	if r := g.refusal.Load(); r != nil {
		return r.err
	}
	return nil
}
