package commands

import (
	"sync/atomic"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/lockcmd"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// session is the per-connection state the proxy keeps itself, one part
// per concern. It is reached only through sessionOf. Its parts belong to
// the connection's goroutine (ServeCommand and the Handler's callbacks),
// except where a part says otherwise.
type session struct {
	// backend is the client as the backend's Forwarder knows it: its id,
	// its protocol (RESP3: the client switched with HELLO 3) and what the
	// Forwarder keeps between its requests (the cluster view its requests
	// were routed by, a WAIT's connections).
	backend upstream.Client
	lib     libInfo
	tx      txState
	// tunnel is the client's own way to Redis once it used pub/sub
	// (pubsub.go); it lasts as long as the connection.
	tunnel upstream.Tunnel
	auth   authState
	// order keeps control requests in their place (control.go).
	order controlOrder
	// pipelined: the client sent more after the request being served
	// (protocol.Conn.Pipelined), set as each request begins.
	pipelined bool
	// onLoop: the serve loop serves the client (protocol.Conn.OnLoop),
	// set with pipelined.
	onLoop bool
	// replies is what CLIENT REPLY set (reply.go).
	replies replyMode
	// lock is the lock family's part: the connection's lock requests in
	// flight, ended when the client goes away (lock workers use them
	// too), and on a tier peer's relay link the link's state
	// (tierlink.go).
	lock lockcmd.ConnState
	// track is the client's CLIENT TRACKING (tracking.go).
	track trackState
	// info is what other clients see of this one (clients.go), made on
	// first use; tunnelKind says what its tunnel is for; noEvict is
	// CLIENT NO-EVICT's setting, shown as a flag.
	info       *clientInfo
	tunnelKind tunnelKind
	noEvict    bool
	// execDB is the database a SELECT in the client's transaction made
	// current when EXEC ran it, -1 if none: set by EXEC's reply on the
	// backend's reader, taken on by adoptExecDB (select.go).
	execDB atomic.Int64
}

// sessionOf is c's session, made on first use: the one way to it.
// ServeCommand makes it, so the Handler's callbacks (BatchDone, possibly
// on another goroutine) only read it.
func sessionOf(c *protocol.Conn) *session {
	s, _ := c.Session.(*session)
	if s == nil {
		s = &session{backend: upstream.Client{ID: c.ID, Conn: c}}
		s.execDB.Store(-1)
		c.Session = s
	}
	return s
}

// tunnelKind is what a client's tunnel carries.
type tunnelKind uint8

const (
	tunnelPubSub  tunnelKind = iota
	tunnelSync               // the replication stream (replication.go)
	tunnelMonitor            // MONITOR (monitor.go)
)

// libInfo is what CLIENT SETINFO said, for CLIENT INFO.
type libInfo struct{ name, ver string }

// txState is the client's own backend connection while it needs one (see
// pinned.go) and the state that holds it. BatchDone gives the connection
// back from whichever goroutine completes the batch.
type txState struct {
	pinned   *upstream.Pinned
	inMulti  bool
	watching bool
	// deferred: MULTI was answered but not yet sent, because the backend
	// routes by key (a Redis Cluster): it goes to the master of the first
	// queued command's key, which is unknown until that command arrives.
	deferred bool
	// denied: a command of the transaction was refused by the user's ACL;
	// EXEC aborts, as Redis does.
	denied bool
	// blocked: a blocking command was sent on pinned and is in the
	// Handler's blockedClients (unblock.go) until its batch is done.
	blocked bool
	// queued counts the commands sent into the open transaction, selects
	// are the SELECTs among them (select.go); execSelects: an EXEC whose
	// reply may change the client's database is on its way.
	queued      int
	selects     []queuedSelect
	execSelects bool
}

// authState is, with authentication on (acl.go), the connection's user
// (nil: not authenticated) and whether it was set since the connection
// began or RESET; keyRefs is scratch space for a request's keys.
type authState struct {
	user    *auth.User
	userSet bool
	keyRefs []keys.KeyRef
}

// The session is the lock family's view of the connection
// (lockcmd.Client).
var _ lockcmd.Client = (*session)(nil)

// State is the lock family's part of the session.
func (s *session) State() *lockcmd.ConnState { return &s.lock }

// HolderPrefix is what every owner stored for the connection's user starts
// with (with authentication on, asked only then): the user's name and a
// NUL byte.
func (s *session) HolderPrefix() string { return s.auth.user.Name() + "\x00" }

// RESP3 reports whether the client speaks RESP3 (HELLO 3).
func (s *session) RESP3() bool { return s.backend.RESP3 }

// User is the name of the connection's ACL user, "" before it
// authenticated.
func (s *session) User() string {
	if s.auth.user == nil {
		return ""
	}
	return s.auth.user.Name()
}

// CanRead reports whether the connection's user may read key (with
// authentication on, asked only then).
func (s *session) CanRead(key []byte) bool { return s.auth.user.CanKey(key, true, false) }

// lockConn is c as the lock family sees it.
func lockConn(c *protocol.Conn) lockcmd.Conn { return lockcmd.Conn{Conn: c, Client: sessionOf(c)} }
