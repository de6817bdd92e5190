// Package tls_test checks fenceproxy's TLS, for clients (--tls-listen and
// client certificates) and for the backend (--backend-tls), with
// certificates made by the tests (testenv.MakeCerts) and real
// redis-server processes speaking TLS.
package tls_test

import (
	"strconv"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// do runs one command and fails the test unless the reply is want.
func do(t *testing.T, c *testenv.Conn, want string, args ...string) []byte {
	t.Helper()
	reply := c.Do(args...)
	if want != "" && string(reply) != want {
		t.Fatalf("%s = %s, want %s", testenv.ShowCommand(args), testenv.ShowReply(reply), testenv.ShowReply([]byte(want)))
	}
	return reply
}

// token runs LOCK.ACQUIRE and returns its token, failing on anything else.
func token(t *testing.T, c *testenv.Conn, resource, owner string) int64 {
	t.Helper()
	reply := c.Do("LOCK.ACQUIRE", resource, owner, "10000")
	tok, ok := testenv.ParseInt(reply)
	if !ok || tok <= 0 {
		t.Fatalf("LOCK.ACQUIRE %s %s = %s, want a token", resource, owner, testenv.ShowReply(reply))
	}
	return tok
}

// lockFamily runs the lock family on c and checks each reply.
func lockFamily(t *testing.T, c *testenv.Conn, resource string) {
	t.Helper()
	tok := token(t, c, resource, "a")
	do(t, c, "$-1\r\n", "LOCK.ACQUIRE", resource, "b", "10000")
	do(t, c, ":"+itoa(tok)+"\r\n", "LOCK.RENEW", resource, "a", "10000")
	do(t, c, ":1\r\n", "FENCE.CHECK", resource, itoa(tok))
	info, err := testenv.ParseLockInfo(c.Do("LOCK.INFO", resource))
	if err != nil || string(info.Owner) != "a" || info.Token != tok {
		t.Fatalf("LOCK.INFO = %+v (%v), want owner a, token %d", info, err, tok)
	}
	do(t, c, ":1\r\n", "LOCK.RELEASE", resource, "a")
	if tok2 := token(t, c, resource, "b"); tok2 <= tok {
		t.Fatalf("token after release %d, not above %d", tok2, tok)
	}
	do(t, c, ":0\r\n", "FENCE.CHECK", resource, itoa(tok))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
