package locks

import "github.com/fenceproxy/fenceproxy/internal/persist"

// MaxResourceLen is the longest resource name, in bytes: the fence store's
// bound (persist.MaxResourceLen), which the command layer checks before a
// request reaches the Manager.
const MaxResourceLen = persist.MaxResourceLen

// TokenStore is the fence store as the Manager uses it: where fencing
// tokens come from and where each resource's newest issued token is
// recorded. PersistStore (a Pebble database under --data-dir) is one; the
// tier's store, replicated across its nodes (internal/tier), is another. The
// Manager's invariants (see the package doc) hold over any TokenStore that
// keeps the contract below; a method that cannot keep it must return an
// error, and the Manager then replies no token.
//
// Resources are 1 to MaxResourceLen bytes. Every method may be
// called concurrently, but Reserve, Confirm and Cancel of one resource come
// one at a time, from a section the Manager serializes per resource,
// except for the tokens a waiting line reserves ahead of its grants
// (handoff.go): those are reserved, and cancelled when no grant used them,
// outside it, concurrently with the resource's other calls (each token is
// its own reservation). Confirm always comes from the section.
//
// Tokens:
//
//   - NextToken returns a token strictly greater than every token it
//     returned before, in this process or any earlier one on the same
//     store, and above Floor. Whatever must be durable for a crash never
//     to make it return a token again, it has made durable before it
//     returns.
//   - Floor is a token issued to every resource and to no owner: every
//     token at or below it is stale, and the floor itself was never
//     replied (the Manager calls it never issued). It never falls.
//   - Adopt(t) raises the floor above t (a token, or a bound, issued
//     without this store), durably, before it returns nil: every later
//     NextToken is above t, and every token at or below t is stale.
//
// Newest tokens:
//
//   - Newest(r) is the newest token confirmed for r, or Floor if that is
//     higher (0 if neither): never below the floor, and at least the token
//     of every Confirm(r) that returned nil before the call. A reserved
//     token not yet confirmed does not count while the process lives.
//   - NewestCached(r) is Newest(r) when the store knows it without I/O
//     (ok true), and ok false otherwise; the Manager then offers a new
//     token without knowing the newest (every new token is above it).
//   - Reserve(r, t) durably records that t, returned by NextToken, may be
//     issued for r: once it returns nil, a crash at any later moment leaves
//     r's newest at least t when the store opens again, unless Cancel(r,
//     t) returned first. Concurrent Reserves may share
//     one sync. It does not change Newest while the process lives.
//   - Confirm(r, t) makes t r's newest, exactly: the Manager vouches that
//     t is above every token confirmed for r before (it read Newest since
//     its last Confirm of r, and serializes them). It is called only
//     after Reserve(r, t) returned nil, so it need not sync: the
//     reservation is durable.
//   - Cancel(r, t) drops the reservation: t was not issued. Its error is
//     only logged: a reservation it failed to drop counts as issued after
//     a crash, which errs on the safe side.
//
// A store that cannot tell whether a write reached its disk (a failed
// sync) must fail every later call rather than answer from what may be
// lost (persist's fail-stop invariant).
//
// Resources are strings here, where the Manager has them: through an
// interface a []byte argument escapes, and the conversion for each call
// would be an allocation on every lock command.
type TokenStore interface {
	NextToken() (uint64, error)
	Floor() uint64
	Adopt(token uint64) error
	Newest(resource string) (uint64, error)
	NewestCached(resource string) (token uint64, ok bool, err error)
	Reserve(resource string, token uint64) error
	Confirm(resource string, token uint64) error
	Cancel(resource string, token uint64) error
}

// reserverAll is a TokenStore that can reserve several tokens of one
// resource with one sync (PersistStore), as a line's refill does
// (handoff.go); another store reserves them one by one.
type reserverAll interface {
	ReserveAll(resource string, tokens []uint64) error
}

// reserveAll reserves tokens for resource in store.
func reserveAll(store TokenStore, resource string, tokens []uint64) error {
	if r, ok := store.(reserverAll); ok {
		return r.ReserveAll(resource, tokens)
	}
	for _, t := range tokens {
		if err := store.Reserve(resource, t); err != nil {
			return err
		}
	}
	return nil
}

// PersistStore is s as a TokenStore.
func PersistStore(s *persist.Store) TokenStore { return persistStore{s} }

// persistStore converts each resource where persist's parameters do not
// escape, so short ones are converted on the stack.
type persistStore struct{ s *persist.Store }

func (p persistStore) NextToken() (uint64, error) { return p.s.NextToken() }
func (p persistStore) Floor() uint64              { return p.s.Floor() }
func (p persistStore) Adopt(token uint64) error   { return p.s.Adopt(token) }

// IssuedBound is the store's synced window bound (issuedBounder).
func (p persistStore) IssuedBound() uint64 { return p.s.SyncedBound() }

func (p persistStore) Newest(resource string) (uint64, error) { return p.s.Newest([]byte(resource)) }

func (p persistStore) NewestCached(resource string) (uint64, bool, error) {
	return p.s.NewestCached([]byte(resource))
}

func (p persistStore) Reserve(resource string, token uint64) error {
	return p.s.Reserve([]byte(resource), token)
}

func (p persistStore) NextTokenNow() (uint64, bool, error) { return p.s.NextTokenNow() }

func (p persistStore) ReserveThen(resource string, token uint64, done persist.Synced) error {
	return p.s.ReserveThen([]byte(resource), token, done)
}

func (p persistStore) ReserveAll(resource string, tokens []uint64) error {
	return p.s.ReserveAll([]byte(resource), tokens)
}

func (p persistStore) Confirm(resource string, token uint64) error {
	return p.s.Confirm(persist.Grant{Resource: []byte(resource), Token: token, AboveAll: true})
}

func (p persistStore) Cancel(resource string, token uint64) error {
	return p.s.Cancel([]byte(resource), token)
}
