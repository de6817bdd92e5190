package locks

import "fmt"

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

// admit asks Options.Admit, if any.
func (m *Manager) admit() error {
	if m.opts.Admit == nil {
		return nil
	}
	return m.opts.Admit()
}

// neverIssued reports whether token cannot have been issued for a
// resource whose newest token (with the floor) is newest: above it, or the
// floor itself when nothing newer was issued since the floor rose.
func (m *Manager) neverIssued(token, newest uint64) bool {
	return newest == 0 || token > newest || token == newest && token == m.opts.Store.Floor()
}

// adoptRecordToken raises the fence store above a record's token that it
// never issued (kindTokenAhead).
func (m *Manager) adoptRecordToken(token int64) error {
	if token <= 0 {
		return fmt.Errorf("locks: unexpected record token %d", token)
	}
	m.opts.Logger.Warn("an owner record carries a token this fence store never issued (a new or restored data dir, or another fenceproxy): "+
		"tokens up to it are no longer honoured", "token", token)
	return m.opts.Store.Adopt(uint64(token))
}
