package testenv

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
)

// The reader itself (resp.AppendReply) is tested in package resp, fed
// whole, split and truncated; here, that ReadReply brings its errors.

func TestReadReply(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	c := &Conn{nc: client, r: bufio.NewReader(client), w: bufio.NewWriter(client), timeout: DefaultTimeout}
	defer c.Close()
	go func() {
		server.Write([]byte("|1\r\n+ttl\r\n:3\r\n+value\r\n$x\r\n"))
	}()
	if r, err := c.ReadReply(); err != nil || string(r) != "|1\r\n+ttl\r\n:3\r\n+value\r\n" {
		t.Fatalf("ReadReply = %q, %v; want the attribute and its reply", r, err)
	}
	if _, err := c.ReadReply(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("ReadReply of $x: %v, want ErrProtocol", err)
	}
	go func() {
		server.Write([]byte("*2\r\n:1\r\n"))
		server.Close()
	}()
	if _, err := c.ReadReply(); err != io.ErrUnexpectedEOF {
		t.Fatalf("ReadReply of a cut array: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := c.ReadReply(); err != io.EOF {
		t.Fatalf("ReadReply at the end: %v, want io.EOF", err)
	}
}

func TestHelpers(t *testing.T) {
	for _, tc := range []struct {
		in string
		n  int64
		ok bool
	}{{":5\r\n", 5, true}, {":-1\r\n", -1, true}, {":x\r\n", 0, false}, {"$1\r\n5\r\n", 0, false}, {":5", 0, false}} {
		if n, ok := ParseInt([]byte(tc.in)); n != tc.n || ok != tc.ok {
			t.Errorf("ParseInt(%q) = %d, %v", tc.in, n, ok)
		}
	}
	for in, want := range map[string]bool{"$-1\r\n": true, "*-1\r\n": true, "_\r\n": true, "$0\r\n\r\n": false, "*0\r\n": false, ":0\r\n": false} {
		if IsNull([]byte(in)) != want {
			t.Errorf("IsNull(%q) != %v", in, want)
		}
	}
	if b, ok := ParseBulk([]byte("$3\r\na\nb\r\n")); !ok || string(b) != "a\nb" {
		t.Errorf("ParseBulk = %q, %v", b, ok)
	}
	for _, in := range []string{"$-1\r\n", "+OK\r\n", "$3\r\nab\r\n", "$1\r\na\r\n:1\r\n"} {
		if _, ok := ParseBulk([]byte(in)); ok {
			t.Errorf("ParseBulk(%q) ok", in)
		}
	}
	elems, ok := SplitArray([]byte("*4\r\n$5\r\nowner\r\n$-1\r\n$5\r\ntoken\r\n*1\r\n:7\r\n"))
	if !ok || len(elems) != 4 || string(elems[1]) != "$-1\r\n" || string(elems[3]) != "*1\r\n:7\r\n" {
		t.Errorf("SplitArray = %q, %v", elems, ok)
	}
	for _, in := range []string{"*-1\r\n", ":1\r\n", "*2\r\n:1\r\n"} {
		if _, ok := SplitArray([]byte(in)); ok {
			t.Errorf("SplitArray(%q) ok", in)
		}
	}
	if got := string(AppendCommand(nil, "SET", "k", "")); got != "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n" {
		t.Errorf("AppendCommand = %q", got)
	}
}
