package locks

import (
	"bytes"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/backend"
)

// TestAppendEval: a script call encodes to exactly the RESP request that
// its arguments, spelled out, give through backend.AppendCommand.
func TestAppendEval(t *testing.T) {
	cases := []struct {
		call ScriptCall
		want []string
	}{
		{ScriptCall{Source: "return 1"}, []string{"EVAL", "return 1", "0"}},
		{ScriptCall{Source: "x", SHA: "abc", Keys: []string{"k1", "k2"}, Args: []any{"own", int64(-5), 7, uint64(18446744073709551615), true, false, []byte("b\r\n")}},
			[]string{"EVALSHA", "abc", "2", "k1", "k2", "own", "-5", "7", "18446744073709551615", "1", "0", "b\r\n"}},
		{ScriptCall{SHA: "s", Keys: []string{""}, Args: []any{""}}, []string{"EVALSHA", "s", "1", "", ""}},
	}
	for _, c := range cases {
		args := make([][]byte, len(c.want))
		for i, a := range c.want {
			args[i] = []byte(a)
		}
		want := backend.AppendCommand(nil, args)
		if got := appendEval([]byte("junk"), c.call); !bytes.Equal(got[4:], want) || string(got[:4]) != "junk" {
			t.Errorf("appendEval(%+v) = %q, want %q after what was there", c.call, got, want)
		}
	}
}
