package commands

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
)

// aclHandler is a Handler with Redis 7.0's command table (the keys
// package's recorded COMMAND reply) and users, enough to run authorize.
func aclHandler(t testing.TB, acl string) *Handler {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "keys", "testdata", "command-7.0.reply"))
	if err != nil {
		t.Fatal(err)
	}
	kt, err := keys.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := auth.Parse(strings.NewReader(acl), "test.acl")
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.Compile(specs, "", ACLCommands(kt))
	if err != nil {
		t.Fatal(err)
	}
	return NewHandler(Options{Keys: kt, ACL: a, Metrics: metrics.New()})
}

func args(words ...string) [][]byte {
	b := make([][]byte, len(words))
	for i, w := range words {
		b[i] = []byte(w)
	}
	return b
}

// TestAuthorizeAllocations: the check of an allowed request allocates
// nothing, for a user confined to key patterns (the most work) and for one
// with every permission.
func TestAuthorizeAllocations(t *testing.T) {
	h := aclHandler(t, "user alice on >a ~tenant-a:* %R~shared:* +@all -flushall &news.*\nuser root on >r ~* &* +@all\n")
	for _, user := range []string{"alice", "root"} {
		c := &protocol.Conn{}
		s := sessionOf(c)
		s.user, s.authInit = h.opts.ACL.User(user), true
		for _, req := range [][][]byte{
			args("GET", "tenant-a:1"),
			args("set", "tenant-a:1", "v", "EX", "10"),
			args("MGET", "tenant-a:1", "tenant-a:2", "shared:3", "tenant-a:4", "tenant-a:5"),
			args("EVALSHA", "0123456789012345678901234567890123456789", "2", "tenant-a:1", "tenant-a:2", "x"),
			args("CONFIG", "GET", "maxmemory"),
			args("LOCK.ACQUIRE", "tenant-a:job", "owner", "1000"),
			args("FENCE.EXEC", "tenant-a:job", "7", "SET", "tenant-a:k", "v"),
			args("PUBLISH", "news.1", "m"),
		} {
			if !h.authorize(c, req, nil) {
				t.Fatalf("%s may send %q", user, req)
			}
			if n := testing.AllocsPerRun(100, func() { h.authorize(c, req, nil) }); n != 0 {
				t.Errorf("authorize(%s, %q) allocates %v times, want 0", user, req, n)
			}
		}
	}
}

// TestPermitted: what a confined user may and may not send, including the
// lock family's resources and FENCE.EXEC's command.
func TestPermitted(t *testing.T) {
	h := aclHandler(t, "user alice on >a ~tenant-a:* %R~shared:* %W~inbox:* +@all -flushall -@dangerous +sort\n")
	u := h.opts.ACL.User("alice")
	s := &session{}
	for _, c := range []struct {
		req  []string
		want string
	}{
		{[]string{"GET", "tenant-a:1"}, ""},
		{[]string{"GET", "x"}, replyNoPermKey},
		{[]string{"MGET", "tenant-a:1", "x"}, replyNoPermKey},
		{[]string{"SET", "inbox:1", "v"}, ""},
		{[]string{"SET", "inbox:1", "v", "GET"}, replyNoPermKey},
		{[]string{"GET", "inbox:1"}, replyNoPermKey},
		{[]string{"SORT", "shared:l", "STORE", "x"}, replyNoPermKey},
		{[]string{"SORT", "shared:l", "STORE", "inbox:1"}, ""},
		{[]string{"FLUSHALL"}, noPermCommand("flushall")},
		{[]string{"CONFIG", "GET", "x"}, noPermCommand("config|get")},
		{[]string{"CONFIG", "NOSUCH"}, noPermCommand("config|nosuch")},
		{[]string{"NOSUCHCOMMAND", "x"}, noPermCommand("nosuchcommand")},
		{[]string{"GET"}, ""}, // arity: Redis's own error, nothing runs
		{[]string{"LOCK.ACQUIRE", "tenant-b:r", "o", "1"}, replyNoPermKey},
		{[]string{"LOCK.ACQUIRE", "shared:r", "o", "1"}, replyNoPermKey},
		{[]string{"LOCK.INFO", "shared:r"}, ""},
		{[]string{"FENCE.EXEC", "tenant-a:r", "1", "GET", "x"}, replyNoPermKey},
		{[]string{"FENCE.EXEC", "tenant-a:r", "1", "FLUSHALL"}, noPermCommand("flushall")},
		{[]string{"FENCE.EXEC", "tenant-a:r", "1", "LOCK.ACQUIRE", "tenant-a:x", "o", "1"}, noPermCommand("lock.acquire")},
		{[]string{"LOCK.TOP"}, ""},
		{[]string{"SPUBLISH", "ch", "m"}, replyNoPermChan},
	} {
		if got := h.permitted(u, s, args(c.req...), true); got != c.want {
			t.Errorf("%q: %q, want %q", c.req, got, c.want)
		}
	}
}

// BenchmarkAuthorize: the cost of the check per request, for GET with a
// confined user (one pattern match) and for MGET of 5 keys.
func BenchmarkAuthorize(b *testing.B) {
	h := aclHandler(b, "user alice on >a ~tenant-a:* +@all -flushall\n")
	c := &protocol.Conn{}
	s := sessionOf(c)
	s.user, s.authInit = h.opts.ACL.User("alice"), true
	for _, bc := range []struct {
		name string
		req  [][]byte
	}{
		{"GET", args("GET", "tenant-a:1")},
		{"MGET5", args("MGET", "tenant-a:1", "tenant-a:2", "tenant-a:3", "tenant-a:4", "tenant-a:5")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				h.authorize(c, bc.req, nil)
			}
		})
	}
}
