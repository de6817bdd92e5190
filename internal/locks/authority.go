package locks

import (
	"context"
	"fmt"

	"github.com/fenceproxy/fenceproxy/internal/ratelog"
)

// How the lock manager keeps to the token authority (internal/authority,
// persist's floor):
//
//   - Every command that issues or judges tokens asks Options.Admit first:
//     while another fenceproxy with another fence store is live on the
//     backend, or this one's heartbeat is overdue, tokens from two stores
//     could interleave, and the command is refused. A release (owner
//     compare only) and LOCK.INFO are not.
//   - The store's Newest is never below its floor: a token below it may
//     have been issued by a store this one does not know (a new or
//     restored data dir), so it is never current; renew and a same-owner
//     re-arm refuse records that carry one, and the holder's next acquire
//     gets a new token above all. The floor itself was issued to nobody:
//     FENCE.CHECK and FENCE.EXEC call it never issued.
//   - An owner record whose token is at or above the acquire's candidate
//     (kindTokenAhead) was written by a store this one does not know: the
//     store adopts that token (its floor and counter go above it, synced)
//     and the acquire asks again, so that no grant ever gets a token below
//     one a record shows, nor overwrites such a record with a lower one.
//   - Unless no fence store can have issued that token: one above the
//     store's issued bound (issuedBounder: every token any fence store
//     ever issued is at most a bound it shared in Redis before issuing
//     from it, and this store adopted the Redis bound before its first
//     token, authority invariants 1 and 2; a crash between a record's
//     write and its token's fsync leaves a token within the window the
//     store had already synced, which a restart starts above). Such a
//     record was written by a client (through an older proxy, or to Redis
//     directly), and adopting it would let anyone raise every resource's
//     floor to the end of the token space with one write. It is counted
//     (Metrics.ForeignTokens), logged, and that resource's acquires are
//     refused with a ForeignTokenError until the record is gone; the
//     floor stays, and every other resource is granted as before.

// admit asks Options.Admit, if any.
func (m *Manager) admit() error {
	if m.opts.Admit == nil {
		return nil
	}
	return m.opts.Admit()
}

// AdmitWithin is what a command off the serve loop asks before it issues or
// judges tokens: Options.AdmitWithin (else Admit), which may wait for a
// late heartbeat round within ctx.
func (m *Manager) AdmitWithin(ctx context.Context) error {
	if m.opts.AdmitWithin == nil {
		return m.admit()
	}
	return m.opts.AdmitWithin(ctx)
}

// neverIssued reports whether token cannot have been issued for a
// resource whose newest token (with the floor) is newest: above it, or the
// floor itself when nothing newer was issued since the floor rose.
func (m *Manager) neverIssued(token, newest uint64) bool {
	return newest == 0 || token > newest || token == newest && token == m.opts.Store.Floor()
}

// issuedBounder is a TokenStore that knows the highest token it can have
// issued: its durable window bound (persist's synced bound, a tier's
// committed one), which covers every token any fence store issued on this
// backend once the store has joined it (see above). 0: not known.
type issuedBounder interface {
	IssuedBound() uint64
}

// ForeignTokenError: the owner record of Resource (at Key in Redis)
// carries Token, above every token a fence store could have issued
// (Bound): a client wrote it. The acquire is refused; nothing is adopted.
type ForeignTokenError struct {
	Resource, Key string
	Token, Bound  uint64
}

// RESPError is the client's error reply (resp.CodedError): what to do to
// free the resource.
func (e *ForeignTokenError) RESPError() (code, msg string) {
	return "ERR", fmt.Sprintf("fenceproxy: the owner record of '%s' in Redis carries token %d, which no fenceproxy issued "+
		"(it was written by a client, not through the lock commands); delete key '%s' directly in Redis (or let it expire) to free the resource; nothing was granted",
		printable(e.Resource), e.Token, printable(e.Key))
}

// printable is s for an error reply: bytes outside printable ASCII become
// '?', and past 128 bytes it is cut short with "...".
func printable(s string) string {
	const most = 128
	b := make([]byte, 0, min(len(s), most)+3)
	for i := 0; i < len(s); i++ {
		if i == most {
			return string(append(b, "..."...))
		}
		c := s[i]
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return string(b)
}

func (e *ForeignTokenError) Error() string {
	return fmt.Sprintf("locks: the owner record of %q carries token %d, above every token issued (%d)", e.Resource, e.Token, e.Bound)
}

var foreignTokenLog ratelog.EverySecond

// judgeRecordToken takes a record's token at or above an acquire's
// candidate (kindTokenAhead): adopted if a fence store may have issued
// it, else refused with a ForeignTokenError.
func (m *Manager) judgeRecordToken(resource, key string, token int64) error {
	if token <= 0 {
		return fmt.Errorf("locks: unexpected record token %d", token)
	}
	if b, ok := m.opts.Store.(issuedBounder); ok {
		if bound := b.IssuedBound(); bound > 0 && uint64(token) > bound {
			if m.opts.Metrics != nil {
				m.opts.Metrics.ForeignTokens.Inc()
			}
			foreignTokenLog.Warn(m.opts.Logger, "an owner record in Redis carries a token no fence store issued (written by a client, not by fenceproxy): "+
				"not adopted; the resource is refused until the record is deleted", "resource", resource, "key", key, "token", token, "issued_bound", bound)
			return &ForeignTokenError{Resource: resource, Key: key, Token: uint64(token), Bound: bound}
		}
	}
	// Another fence store may have issued it: raise this one above it.
	// (The only way a record's token is adopted: every grant path, the
	// recipes' too, comes through this judgement.)
	m.opts.Logger.Warn("an owner record carries a token this fence store never issued (a new or restored data dir, or another fenceproxy): "+
		"tokens up to it are no longer honoured", "token", token)
	return m.opts.Store.Adopt(uint64(token))
}
