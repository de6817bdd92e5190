package pinned

import (
	"strings"
	"testing"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// TestClientIDByAddr: Unblock finds the pinned connection's id in CLIENT
// LIST by its address alone, never by a prefix of another's.
func TestClientIDByAddr(t *testing.T) {
	list := "id=7 addr=127.0.0.1:50001 laddr=127.0.0.1:6379 fd=8 name= cmd=blpop\n" +
		"id=12 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=9 name= cmd=client|list\n"
	reply := redcon.AppendBulkString(nil, list)
	for _, tc := range []struct {
		addr, id string
		ok       bool
	}{
		{"127.0.0.1:50001", "7", true},
		{"127.0.0.1:5000", "12", true},
		{"127.0.0.1:500", "", false},
	} {
		id, ok := clientIDByAddr(reply, tc.addr)
		if id != tc.id || ok != tc.ok {
			t.Errorf("clientIDByAddr(%s) = %q, %v; want %q, %v", tc.addr, id, ok, tc.id, tc.ok)
		}
	}
	if _, ok := clientIDByAddr([]byte("-ERR no\r\n"), "127.0.0.1:50001"); ok {
		t.Error("an error reply named a client")
	}
}

// TestNoRedirects: MOVED and ASK on a pinned connection become the proxy's
// -CROSSSLOT; every other reply, TRYAGAIN included, passes as Redis wrote
// it, after what the slot already held.
func TestNoRedirects(t *testing.T) {
	for _, tc := range []struct{ reply, want string }{
		{"-MOVED 3999 127.0.0.1:7002\r\n", replyOtherMaster},
		{"-ASK 3999 127.0.0.1:7002\r\n", replyOtherMaster},
		{"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"},
		{"$1\r\nv\r\n", "$1\r\nv\r\n"},
	} {
		done := false
		p := resp.NewReplyFunc(func() { done = true })
		p.Buf = append(p.Buf, "+QUEUED\r\n"...)
		sub := noRedirects(p)
		sub.Buf = append(sub.Buf, tc.reply...)
		sub.Done()
		if !done {
			t.Fatalf("%q: the client's reply was not completed", tc.reply)
		}
		if got := strings.TrimPrefix(string(p.Buf), "+QUEUED\r\n"); got != tc.want || !strings.HasPrefix(string(p.Buf), "+QUEUED\r\n") {
			t.Errorf("%q reached the client as %q, want %q", tc.reply, p.Buf, tc.want)
		}
	}
}
