package upstream

import (
	"errors"
	"strings"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Databases other than 0 (SELECT n in front of a standalone Redis).
//
// A Redis connection has one current database, and the proxy's shared
// connections carry many clients' requests, so a client's database picks
// its connections: database 0's are the Node's pools; each other database
// a client selects gets pools of its own, opened on its first use, whose
// connections SELECT it when they connect (and reconnect). A client's
// requests still keep their order: they all travel on its one connection
// of its database's pool, and SELECT waits for the replies to what was
// sent before it (the client's Conn.AfterReplies) before later requests take
// the other database's connection.
//
// A connection of the client's own (MULTI, WATCH, blocking commands) is
// SELECTed to the client's database when it is handed out and back to 0
// when it returns clean, and follows a SELECT sent on it (Pinned.Select,
// Pinned.Selected).
//
// A client that authenticated as a Redis user other than the proxy's
// (Login) gets that user's shared connections in the same way, one set per
// user, database and protocol (database 0's too), opened as that user on
// first use: Redis applies that user's ACL to what the client sends, while
// the clients of one user share connections as the proxy's own clients do,
// instead of a connection each. They are keyed by the password too: a
// client reaches a user's connections only with the credentials Redis
// accepted for it (Forwarder.OpenDB is called once Redis has checked them).
//
// A Redis Cluster has only database 0: SELECT of another answers Redis
// Cluster's own error.

// errClusterSelect is Redis Cluster's answer to SELECT of a database other
// than 0.
var errClusterSelect = resp.Error{Code: "ERR", Msg: "SELECT is not allowed in cluster mode"}

// errDBRange is Redis's answer to SELECT of a database it does not have.
var errDBRange = resp.Error{Code: "ERR", Msg: "DB index is out of range"}

// databases are a Node's shared connections to databases other than 0.
type databases struct {
	opts backend.Options // the shared pools' options; DB is set per database
	size int             // the Node's pool size

	mu    sync.Mutex
	pools map[dbKey]*backend.Pool
	// limit is the lowest database Redis refused as out of range (0: none
	// refused yet), so that a client asking again is answered at once.
	limit  int
	closed bool
}

type dbKey struct {
	resp3 bool
	db    int
	login Login
}

// Login is the Redis user a client's shared connections are opened as:
// the zero Login for the proxy's own (Client.User).
type Login struct{ User, Password string }

// Login is the user cl's shared connections are opened as.
func (cl *Client) Login() Login { return Login{cl.User, cl.Password} }

// pool returns the shared connections of database db, as login, for
// clients speaking RESP3 if resp3, opening them on first use. The error is
// errDBRange for Redis's refusal of the database, Redis's refusal of the
// login (a resp.Error), or why it could not be reached.
func (d *databases) pool(resp3 bool, db int, login Login) (*backend.Pool, error) {
	key := dbKey{resp3, db, login}
	d.mu.Lock()
	if p := d.pools[key]; p != nil {
		d.mu.Unlock()
		return p, nil
	}
	if d.limit != 0 && db >= d.limit {
		d.mu.Unlock()
		return nil, errDBRange
	}
	d.mu.Unlock()
	// Dialled outside the lock: a slow Redis must not hold up the clients
	// of databases already open.
	opts := d.opts
	opts.RESP3, opts.DB = resp3, db
	opts.AsUser, opts.AsPassword = login.User, login.Password
	p, err := backend.NewPool(opts, max(d.size/4, 1))
	d.mu.Lock()
	defer d.mu.Unlock()
	var re resp.Error
	if errors.As(err, &re) {
		if !strings.Contains(re.Msg, errDBRange.Msg) {
			return nil, re // the user's AUTH refused (its password changed since)
		}
		if d.limit == 0 || db < d.limit {
			d.limit = db
		}
		return nil, errDBRange
	}
	if err != nil {
		return nil, err
	}
	if d.closed {
		p.Close()
		return nil, ErrUnavailable
	}
	if other := d.pools[key]; other != nil { // another client opened it meanwhile
		p.Close()
		return other, nil
	}
	if d.pools == nil {
		d.pools = make(map[dbKey]*backend.Pool)
	}
	d.pools[key] = p
	return p, nil
}

// open reports whether database db's pools for resp3, as login, are open.
func (d *databases) open(resp3 bool, db int, login Login) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pools[dbKey{resp3, db, login}] != nil
}

func (d *databases) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, p := range d.pools {
		p.Close()
	}
	d.pools = nil
}

// Select makes db the client's database: later requests go to its
// connections. Redis's own errors (an index out of range) are the reply;
// a database that cannot be opened because Redis is unreachable gets
// the node's refusal or ErrUnavailable.
func (s *standalone) Select(cl *Client, db int) error {
	if err := s.OpenDB(cl.Login(), cl.RESP3, db); err != nil {
		return err
	}
	cl.DB = db
	return nil
}

// OpenDB dials database db's pool for resp3, as login, if it is not open
// (database 0's connections of the proxy's own user are the master's own).
func (s *standalone) OpenDB(login Login, resp3 bool, db int) error {
	if db < 0 {
		return errDBRange
	}
	if db != 0 || login != (Login{}) {
		n := s.master.Load()
		if _, err := n.dbs.pool(resp3, db, login); err != nil {
			var re resp.Error
			if errors.Is(err, errDBRange) || errors.As(err, &re) {
				return err
			}
			return n.Unreachable()
		}
	}
	return nil
}

// DBOpen: database 0's connections of the proxy's own user are the
// master's own; another's are open once a client selected it (or
// authenticated as its user) on this master.
func (s *standalone) DBOpen(login Login, resp3 bool, db int) bool {
	return db == 0 && login == (Login{}) || s.master.Load().dbs.open(resp3, db, login)
}

// Ready: the client's database's connections are open (DBOpen).
func (s *standalone) Ready(cl *Client) bool { return s.DBOpen(cl.Login(), cl.RESP3, cl.DB) }

// Open opens the client's database's connections (OpenDB).
func (s *standalone) Open(cl *Client) error { return s.OpenDB(cl.Login(), cl.RESP3, cl.DB) }

// Ready: a tracking client's connections to every master are open (or
// just found unreachable: tracking.Tracker.Ready). A cluster client is in
// database 0, whose connections are each master's own (Select refuses
// another).
func (c *Cluster) Ready(cl *Client) bool { return cl.track == nil || cl.track.Ready(c.Masters()) }

// Open opens a tracking client's connections to every master that has
// none (each with tracking on as the client set it).
func (c *Cluster) Open(cl *Client) error {
	if cl.track != nil {
		cl.track.Open(c.Masters())
	}
	return nil
}

// DBOpen: a Redis Cluster has database 0 only, and its clients keep the
// proxy's connections whoever they authenticated as.
func (c *Cluster) DBOpen(_ Login, _ bool, db int) bool { return db == 0 }

// Select accepts only database 0, as Redis Cluster does.
func (c *Cluster) Select(cl *Client, db int) error { return c.OpenDB(Login{}, cl.RESP3, db) }

// OpenDB: database 0's connections are each master's own; there is no
// other.
func (c *Cluster) OpenDB(_ Login, _ bool, db int) error {
	if db != 0 {
		return errClusterSelect
	}
	return nil
}
