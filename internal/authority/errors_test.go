package authority

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// TestErrorsCarryTheirReply: the authority's errors that a lock command's
// client sees answer for themselves (resp.CodedError).
func TestErrorsCarryTheirReply(t *testing.T) {
	for _, c := range []struct {
		err        error
		code, head string
	}{
		{fmt.Errorf("round: %w", ErrUnconfirmed), "TRYAGAIN", "fenceproxy: this proxy is not confirmed as the backend's token authority right now"},
		{&NoReplicasError{Acked: 0, Wanted: 1}, "NOREPLICAS", "fenceproxy: 0 of 1 required replicas acknowledged; the master has no replica"},
		{&ConflictError{Stores: []string{"abc"}}, "ERR", "fenceproxy: another fenceproxy with another fence store (store id abc)"},
	} {
		var coded resp.CodedError
		if !errors.As(c.err, &coded) {
			t.Fatalf("%v is no resp.CodedError", c.err)
		}
		if code, msg := coded.RESPError(); code != c.code || !strings.HasPrefix(msg, c.head) {
			t.Errorf("%v answers %s %q, want %s %q...", c.err, code, msg, c.code, c.head)
		}
	}
	var late interface{ AuthorityUnconfirmed() }
	if !errors.As(ErrUnconfirmed, &late) {
		t.Errorf("ErrUnconfirmed is not AuthorityUnconfirmed")
	}
}
