package upstream

import "testing"

func TestRedirects(t *testing.T) {
	for _, tc := range []struct {
		reply string
		kind  redirect
		slot  int
		addr  string
	}{
		{"-MOVED 3999 127.0.0.1:6381\r\n", moved, 3999, "127.0.0.1:6381"},
		{"-ASK 16383 10.0.0.2:7000\r\n", ask, 16383, "10.0.0.2:7000"},
		{"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", retry, -1, ""},
		{"-CLUSTERDOWN The cluster is down\r\n", retry, -1, ""},
		{"-MOVED 99999 127.0.0.1:1\r\n", moved, -1, ""}, // out of range: retried, never indexed
		{"-ERR MOVED is not an error here\r\n", notRedirect, -1, ""},
		{"+MOVED 1 a:1\r\n", notRedirect, -1, ""},
		{"-MOVEDX\r\n", notRedirect, -1, ""},
		{"", notRedirect, -1, ""},
	} {
		if got := redirectKind([]byte(tc.reply)); got != tc.kind {
			t.Errorf("redirectKind(%q) = %v, want %v", tc.reply, got, tc.kind)
		}
		if tc.kind == moved || tc.kind == ask {
			slot, addr := parseRedirect([]byte(tc.reply))
			if slot != tc.slot || addr != tc.addr {
				t.Errorf("parseRedirect(%q) = %d, %q; want %d, %q", tc.reply, slot, addr, tc.slot, tc.addr)
			}
		}
	}
}
