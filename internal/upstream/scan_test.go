package upstream

import (
	"strconv"
	"strings"
	"testing"
)

// TestScanReply: a master's SCAN reply gets the client's cursor: the
// master's own cursor above the master's position, or the next master's
// position when the master's iteration ended.
func TestScanReply(t *testing.T) {
	for _, tc := range []struct {
		reply       string
		at, masters int
		want        string
	}{
		{"*2\r\n$2\r\n17\r\n*1\r\n$1\r\nk\r\n", 1, 3, "*2\r\n$5\r\n17409\r\n*1\r\n$1\r\nk\r\n"}, // 17<<10 | 1
		{"*2\r\n$1\r\n0\r\n*0\r\n", 1, 3, "*2\r\n$1\r\n2\r\n*0\r\n"},                            // next master
		{"*2\r\n$1\r\n0\r\n*0\r\n", 2, 3, "*2\r\n$1\r\n0\r\n*0\r\n"},                            // done
		{"-ERR invalid cursor\r\n", 0, 3, "-ERR invalid cursor\r\n"},
	} {
		if got := string(scanReply([]byte(tc.reply), tc.at, tc.masters, nil)); got != tc.want {
			t.Errorf("scanReply(%q, %d, %d) = %q, want %q", tc.reply, tc.at, tc.masters, got, tc.want)
		}
	}
}

// TestScanCursor: the client's cursor carries the master's position in its
// low bits; a master's own cursor too large to carry is an error, not a
// wrong cursor.
func TestScanCursor(t *testing.T) {
	huge := strconv.FormatUint(1<<(64-scanNodeBits), 10)
	reply := "*2\r\n$" + strconv.Itoa(len(huge)) + "\r\n" + huge + "\r\n*0\r\n"
	if got := string(scanReply([]byte(reply), 0, 3, nil)); !strings.HasPrefix(got, "-ERR ") {
		t.Errorf("a cursor too large: %q, want an error", got)
	}
}

// argv is a request's arguments.
func argv(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, a := range s {
		out[i] = []byte(a)
	}
	return out
}
