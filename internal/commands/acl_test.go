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
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
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
		s.auth.user, s.auth.userSet = h.opts.ACL.User(user), true
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
		{[]string{"FENCE.EXEC", "tenant-a:r", "1", "auth", "alice", "secret"}, "ERR fenceproxy: FENCE.EXEC cannot run AUTH, HELLO or ACL"},
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
	s.auth.user, s.auth.userSet = h.opts.ACL.User("alice"), true
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

// TestACLKeyRefsMatchRedis compares the keys and flags aclKeyRefs computes
// for SET, BITFIELD and SORT with COMMAND GETKEYSANDFLAGS of a live
// redis-server (Redis's own setGetKeys, bitfieldGetKeys, sortGetKeys), and
// keeps the rest on the key specs (MIGRATE's placeholder).
func TestACLKeyRefsMatchRedis(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, r.Addr)
	kt, err := keys.Load(c.Do("COMMAND"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"SET k v", "SET k v GET", "set k v get EX 10", "SET k v EX 10 NX", "SET k GET",
		"BITFIELD k GET u8 0", "BITFIELD k GET u8 0 OVERFLOW SAT GET i4 1", "BITFIELD k SET u8 0 1",
		"BITFIELD k INCRBY u8 0 1", "BITFIELD k GET u8", "BITFIELD k NOSUCH", "BITFIELD k",
		"SORT k", "SORT k STORE d", "SORT k LIMIT 0 1 STORE d", "SORT k STORE d STORE e", "SORT k BY store STORE d",
		"SORT k GET store", "SORT k STORE", "SORT_RO k", "SORT_RO k LIMIT 0 1 ALPHA",
		"MIGRATE h 1 k 0 10", "MIGRATE h 1 \"\" 0 10 KEYS a b",
	} {
		var a [][]byte
		for _, w := range strings.Split(line, " ") {
			a = append(a, []byte(strings.Trim(w, `"`)))
		}
		cmd := kt.LookupBytes(a[0])
		var got []string
		for _, k := range aclKeyRefs(cmd, cmd.Sub(a).Name(), nil, a) {
			got = append(got, refMode(string(a[k.Pos]), k.Read, k.Write))
		}
		req := append([]string{"COMMAND", "GETKEYSANDFLAGS"}, strings.Split(strings.ReplaceAll(line, `""`, ""), " ")...)
		reply := c.Do(req...)
		var want []string
		if elems, ok := testenv.SplitArray(reply); ok {
			for _, e := range elems {
				pair, _ := testenv.SplitArray(e)
				key, _ := testenv.ParseBulk(pair[0])
				flags := strings.ToLower(string(pair[1]))
				want = append(want, refMode(string(key), strings.Contains(flags, "access"),
					strings.Contains(flags, "insert") || strings.Contains(flags, "delete") || strings.Contains(flags, "update")))
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: aclKeyRefs %q, GETKEYSANDFLAGS %q (%q)", line, got, want, reply)
		}
	}
}

func refMode(key string, read, write bool) string {
	switch {
	case read && write:
		return key + ":RW"
	case read:
		return key + ":R"
	case write:
		return key + ":W"
	}
	return key + ":-"
}

// FuzzAuthorize feeds the ACL check any request, as a confined user and
// with a few real command names as seeds: it must let it through or answer
// it (an error, or ACL WHOAMI's name), never panic, for any arguments.
func FuzzAuthorize(f *testing.F) {
	h := aclHandler(f, "user alice on >a ~tenant-a:* %R~shared:* %W~inbox:* &news.* +@all -flushall\n")
	for _, seed := range []string{
		"GET tenant-a:1", "MGET tenant-a:1 x", "SET inbox:1 v GET", "SORT shared:l BY w_* STORE inbox:x LIMIT 0",
		"BITFIELD inbox:1 GET u8", "EVAL s 2 tenant-a:1", "EVAL s -1 a", "XREAD STREAMS tenant-a:s 0",
		"FENCE.EXEC tenant-a:r 1 SORT x STORE", "FENCE.EXEC tenant-a:r 1", "LOCK.ACQUIRE", "MIGRATE h 1 \"\" 0 1 KEYS a",
		"CONFIG GET", "OBJECT", "PSUBSCRIBE news.*", "ZUNIONSTORE d 99999999999 a", "ACL WHOAMI x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var req [][]byte
		for _, w := range strings.Split(line, " ") {
			req = append(req, []byte(w))
		}
		c := &protocol.Conn{}
		s := sessionOf(c)
		s.auth.user, s.auth.userSet = h.opts.ACL.User("alice"), true
		p := resp.NewReplyFunc(func() {})
		if h.authorize(c, req, p) {
			if len(p.Buf) != 0 {
				t.Fatalf("%q allowed with a reply %q", line, p.Buf)
			}
			return
		}
		// Refused (an error), or answered here (ACL WHOAMI): a reply either way.
		if len(p.Buf) == 0 {
			t.Fatalf("%q neither allowed nor answered", line)
		}
	})
}
