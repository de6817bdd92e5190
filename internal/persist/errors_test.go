package persist

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// TestErrorsCarryTheirReply: the errors a lock command's client sees
// answer for themselves (resp.CodedError), wrapped with their cause too,
// so the command layer needs no knowledge of this package's values.
func TestErrorsCarryTheirReply(t *testing.T) {
	for _, c := range []struct {
		err        error
		code, msg  string
		log        string
		unconfirms bool
	}{
		{fmt.Errorf("%w: %w", ErrUnhealthy, errors.New("no space left on device")), "ERR", replyCannotWrite, logCannotWrite, false},
		{ErrClosed, "ERR", replyCannotWrite, logCannotWrite, false},
		{ErrExhausted, "ERR", "fenceproxy: the token space is exhausted; no token was issued", "", false},
		{fmt.Errorf("share: %w", ErrNotShared), "TRYAGAIN", "fenceproxy: this proxy is not confirmed as the backend's token authority right now " +
			"(its heartbeat to Redis is late, or the token bound is not yet written there with the required replicas); nothing was done, retry shortly", "", true},
	} {
		var coded resp.CodedError
		if !errors.As(c.err, &coded) {
			t.Fatalf("%v is no resp.CodedError", c.err)
		}
		if code, msg := coded.RESPError(); code != c.code || msg != c.msg {
			t.Errorf("%v answers %s %q, want %s %q", c.err, code, msg, c.code, c.msg)
		}
		var detail interface{ LogDetail() string }
		got := ""
		if errors.As(c.err, &detail) {
			got = detail.LogDetail()
		}
		if got != c.log {
			t.Errorf("%v: log detail %q, want %q", c.err, got, c.log)
		}
		var late interface{ AuthorityUnconfirmed() }
		if errors.As(c.err, &late) != c.unconfirms {
			t.Errorf("%v: AuthorityUnconfirmed = %v, want %v", c.err, !c.unconfirms, c.unconfirms)
		}
	}
}
