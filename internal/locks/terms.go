package locks

import (
	"errors"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// How the lock manager keeps a deposed leader of a tier away from newer
// leases (Options.Term; the scripts' side is termCheck in scripts.go):
//
//   - Every script that writes an owner record or its guard carries the
//     caller's term, and what it writes carries that term. A single node
//     has term 0 and writes records exactly as before terms were kept.
//   - A record or guard of a higher term than the caller's refuses the
//     script before it decides or writes anything: a leader that was
//     paused or cut off, and has not yet learned that a newer one was
//     elected, can neither grant over, re-arm, renew, release nor undo a
//     lease written in the newer term. It gets ErrDeposed, which clients
//     see as -TRYAGAIN.
//   - A record of a lower term is judged as any record is (owner, token
//     and newest-token checks): the newer leader may re-arm, renew,
//     release or replace it as those allow, and stamps its own term on it.
//
// The rule covers what Redis holds. A lease that ran out is gone with its
// record (and, after the lock-delay, with its guard), so a lower term may
// write the freed resource again. Keeping a term mark beyond the record
// was considered and dropped: it would have to live for ever (a pause has
// no bound, so any expiry can be outslept), one key per resource whose
// lease ever ran out unreleased, and it would wedge a tier rebuilt from
// empty disks, whose terms start again at 1. What it would protect is no
// lease: the resource is free, and in a tier a deposed leader's grant
// cannot be replied, since its token's reservation cannot commit in the
// log; the grant is undone by its own term or runs out, and until then
// the current leader answers busy for it at worst.

// ErrDeposed: a script found the resource's record or guard written in a
// term above this node's: a newer leader of the tier exists. Nothing was
// written. It is its own reply (a resp.CodedError).
var ErrDeposed error = resp.Error{Code: "TRYAGAIN", Msg: "fenceproxy: this node is not the current leader of its tier " +
	"(a newer leader holds this lock's record); nothing was done, retry shortly"}

// newerTermCode is termCheck's refusal: NEWERTERM <the record's term>.
const newerTermCode = "NEWERTERM"

// term is the caller's term every writing script carries.
func (m *Manager) term() uint64 {
	if m.opts.Term == nil {
		return 0
	}
	return m.opts.Term()
}

// twinReply is the twin's reply that w carries, read by read, or w's error
// (deposed's).
func twinReply(w *lockwriter.Write, read func(reply any) error) error {
	reply, err := w.Reply()
	if err != nil {
		return deposed(err)
	}
	return read(reply)
}

// deposed turns a script's NEWERTERM refusal into ErrDeposed; any other
// error it returns as it is.
func deposed(err error) error {
	var re resp.Error
	if errors.As(err, &re) && re.Code == newerTermCode {
		return ErrDeposed
	}
	return err
}
