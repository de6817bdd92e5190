package passthrough

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// These tests come from Redis 7.0.15's own Tcl suite (scripts/redis-suite.sh
// runs it through fenceproxy): each is a case where a unit hung or broke
// through the proxy while Redis answered.

// backendConns is the ids of the clients Redis A has (the proxy's
// connections to it): a shared connection that broke and was dialled again
// has a new id.
func backendConns(t *testing.T, a *testenv.Redis) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	list := string(testenv.Dial(t, a.Addr).Do("CLIENT", "LIST"))
	for _, line := range strings.Split(list, "\n") {
		if id, ok := strings.CutPrefix(line, "id="); ok {
			id, _, _ = strings.Cut(id, " ")
			ids[id] = true
		}
	}
	return ids
}

// TestDeeplyNestedReply: a Lua table that holds itself, returned by EVAL,
// makes Redis nest the reply until Lua's stack runs out (thousands of
// levels) and end it with an error (unit/scripting "Script return recursive
// object"). The proxy relays it byte for byte, and the shared connection it
// came on stays up: before, the reader gave up past 64 levels, the client
// got "lost the connection to Redis" and every request on that shared
// connection with it.
func TestDeeplyNestedReply(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	before := backendConns(t, pr.A)
	script := "local a = {}; local b = {a}; a[1] = b; return a"
	got := same(t, proxy, direct, "EVAL", script, "0")
	if depth := bytes.Count(got, []byte("*1\r\n")); depth < 100 {
		t.Fatalf("the reply nests %d levels; the test needs Redis to nest it deeply", depth)
	}
	if !bytes.HasSuffix(got, []byte("-ERR reached lua stack limit\r\n")) {
		t.Errorf("the reply ends %q, want Redis's stack-limit error", got[max(0, len(got)-40):])
	}
	same(t, proxy, direct, "SET", "after", "1")
	same(t, proxy, direct, "GET", "after")
	for id := range before {
		if !backendConns(t, pr.A)[id] {
			t.Errorf("the proxy's connection id=%s to Redis is gone: the nested reply broke it", id)
		}
	}
	pr.alive(t)
}
