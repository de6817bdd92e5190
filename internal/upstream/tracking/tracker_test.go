package tracking

import "testing"

// TestWithFlag: CLIENT TRACKINGINFO's flags get the flag the tracker adds,
// in Redis's place, in RESP2 and RESP3 (a map and a set).
func TestWithFlag(t *testing.T) {
	for _, tc := range []struct{ in, flag, want string }{
		{"*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$5\r\noptin\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n", "caching-yes",
			"*6\r\n$5\r\nflags\r\n*3\r\n$2\r\non\r\n$5\r\noptin\r\n$11\r\ncaching-yes\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"},
		{"%3\r\n$5\r\nflags\r\n~1\r\n$2\r\non\r\n$8\r\nredirect\r\n:66\r\n$8\r\nprefixes\r\n*0\r\n", "broken_redirect",
			"%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$15\r\nbroken_redirect\r\n$8\r\nredirect\r\n:66\r\n$8\r\nprefixes\r\n*0\r\n"},
		{"-ERR x\r\n", "broken_redirect", "-ERR x\r\n"},
	} {
		if got := string(withFlag([]byte(tc.in), tc.flag)); got != tc.want {
			t.Errorf("withFlag(%q, %s) = %q, want %q", tc.in, tc.flag, got, tc.want)
		}
	}
}
