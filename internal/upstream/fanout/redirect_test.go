package fanout

import "testing"

func TestRedirects(t *testing.T) {
	for _, tc := range []struct {
		reply string
		kind  Redirect
		slot  int
		addr  string
	}{
		{"-MOVED 3999 127.0.0.1:6381\r\n", Moved, 3999, "127.0.0.1:6381"},
		{"-ASK 16383 10.0.0.2:7000\r\n", Ask, 16383, "10.0.0.2:7000"},
		{"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", Retry, -1, ""},
		{"-CLUSTERDOWN The cluster is down\r\n", Retry, -1, ""},
		{"-MOVED 99999 127.0.0.1:1\r\n", Moved, -1, ""}, // out of range: retried, never indexed
		{"-ERR MOVED is not an error here\r\n", NotRedirect, -1, ""},
		{"+MOVED 1 a:1\r\n", NotRedirect, -1, ""},
		{"-MOVEDX\r\n", NotRedirect, -1, ""},
		{"", NotRedirect, -1, ""},
	} {
		if got := RedirectOf([]byte(tc.reply)); got != tc.kind {
			t.Errorf("RedirectOf(%q) = %v, want %v", tc.reply, got, tc.kind)
		}
		if tc.kind == Moved || tc.kind == Ask {
			slot, addr := ParseRedirect([]byte(tc.reply))
			if slot != tc.slot || addr != tc.addr {
				t.Errorf("ParseRedirect(%q) = %d, %q; want %d, %q", tc.reply, slot, addr, tc.slot, tc.addr)
			}
		}
	}
}
