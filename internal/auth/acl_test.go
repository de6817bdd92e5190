package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// testCommands is a small command universe shaped like Redis 7.0's COMMAND,
// with two of fenceproxy's own.
var testCommands = []Command{
	{"get", []string{"read", "string", "fast"}},
	{"set", []string{"write", "string", "slow"}},
	{"mget", []string{"read", "string", "fast"}},
	{"flushall", []string{"keyspace", "write", "slow", "dangerous"}},
	{"keys", []string{"keyspace", "read", "slow", "dangerous"}},
	{"config", []string{"slow"}},
	{"config|get", []string{"admin", "slow", "dangerous"}},
	{"config|set", []string{"admin", "slow", "dangerous"}},
	{"acl", []string{"slow"}},
	{"acl|whoami", []string{"slow"}},
	{"ping", []string{"fast", "connection"}},
	{"publish", []string{"pubsub", "fast"}},
	{"eval", []string{"slow", "scripting"}},
	{"evalsha", []string{"slow", "scripting"}},
	// fenceproxy's own, as commands.ACLCommands lists them.
	{"lock.acquire", []string{"write", "slow", "lock"}},
	{"lock.info", []string{"read", "fast", "lock"}},
}

func compile(t *testing.T, text, requirepass string) *ACL {
	t.Helper()
	specs, err := Parse(strings.NewReader(text), "test.acl")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Compile(specs, requirepass, testCommands)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRules(t *testing.T) {
	sum := sha256.Sum256([]byte("hashed"))
	a := compile(t, `
# tenants
user alice on >apw ~tenant-a:* %R~shared:* %W~inbox:* +@all -flushall -@dangerous +keys
user bob off >bpw ~* +@all
user carol on >c1 >c2 <c1 ~* -@all +get +config|get +@lock
user dave on #`+hex.EncodeToString(sum[:])+` nopass resetpass >d allkeys resetkeys ~x allchannels resetchannels &news.*
	user erin on nopass allcommands -config reset on nopass +ping
`, "")
	alice, bob, carol, dave, erin := a.User("alice"), a.User("bob"), a.User("carol"), a.User("dave"), a.User("erin")
	check := func(what string, got, want bool) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("alice get", alice.CanRun("get"), true)
	check("alice flushall", alice.CanRun("flushall"), false)
	check("alice config|get (@dangerous)", alice.CanRun("config|get"), false)
	check("alice keys (re-added)", alice.CanRun("keys"), true)
	check("alice lock.acquire", alice.CanRun("lock.acquire"), true)
	check("alice future command", alice.CanRun("module.cmd"), false) // -@dangerous cleared +@all
	check("bob future command", bob.CanRun("module.cmd"), true)
	check("alice tenant-a rw", alice.CanKey([]byte("tenant-a:1"), true, true), true)
	check("alice tenant-b", alice.CanKey([]byte("tenant-b:1"), true, false), false)
	check("alice shared read", alice.CanKey([]byte("shared:1"), true, false), true)
	check("alice shared write", alice.CanKey([]byte("shared:1"), false, true), false)
	check("alice inbox write", alice.CanKey([]byte("inbox:1"), false, true), true)
	check("alice inbox read", alice.CanKey([]byte("inbox:1"), true, false), false)
	check("alice inbox neither", alice.CanKey([]byte("inbox:1"), false, false), true)
	check("alice channel", alice.CanChannel([]byte("news"), false), false)
	check("carol get", carol.CanRun("get"), true)
	check("carol set", carol.CanRun("set"), false)
	check("carol config|get", carol.CanRun("config|get"), true)
	check("carol config|set", carol.CanRun("config|set"), false)
	check("carol lock.info", carol.CanRun("lock.info"), true)
	check("dave key x", dave.CanKey([]byte("x"), true, true), true)
	check("dave key y", dave.CanKey([]byte("y"), true, true), false)
	check("dave channel news.1", dave.CanChannel([]byte("news.1"), false), true)
	check("dave psubscribe news.*", dave.CanChannel([]byte("news.*"), true), true)
	check("dave psubscribe news.1*", dave.CanChannel([]byte("news.1*"), true), false)
	check("erin ping", erin.CanRun("ping"), true)
	check("erin get (reset)", erin.CanRun("get"), false)

	for _, c := range []struct {
		user, pass string
		ok         bool
	}{
		{"alice", "apw", true}, {"alice", "bpw", false}, {"bob", "bpw", false}, // off
		{"carol", "c1", false}, {"carol", "c2", true}, {"dave", "hashed", false}, {"dave", "d", true},
		{"erin", "anything", true}, {"nobody", "x", false}, {"default", "", true},
	} {
		if got := a.Authenticate([]byte(c.user), []byte(c.pass)); (got != nil) != c.ok {
			t.Errorf("Authenticate(%s, %s) = %v, want ok=%v", c.user, c.pass, got, c.ok)
		}
	}
	if a.Initial() != a.Default() {
		t.Error("with the default user on nopass, connections should start as default")
	}
}

func TestRequirepass(t *testing.T) {
	a := compile(t, "user alice on >x ~* +@all\n", "sekrit")
	if a.Initial() != nil {
		t.Fatal("with --requirepass a connection must start unauthenticated")
	}
	if a.Authenticate([]byte("default"), []byte("sekrit")) == nil || a.Authenticate([]byte("default"), []byte("x")) != nil {
		t.Fatal("default's password is --requirepass")
	}
	specs, _ := Parse(strings.NewReader("user default on >x\n"), "f")
	if _, err := Compile(specs, "sekrit", testCommands); err == nil {
		t.Fatal("--requirepass with a default user in the file must be refused")
	}
}

// TestRejected: every bad line is refused with the file and line, and
// passwords are never echoed.
func TestRejected(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"usr alice on\n", "test.acl:1: a line must start with \"user <name>\""},
		{"\n\nuser\n", "test.acl:3: \"user\" without a name"},
		{"user alice on\nuser alice off\n", "test.acl:2: user \"alice\" is already defined on line 1"},
		{"user alice on frobnicate\n", "test.acl:1: user \"alice\", rule 2: unknown rule \"frobnicate\""},
		{"user alice on +@nosuch\n", "rule 2: \"+@nosuch\": unknown command category"},
		{"user alice on #abc\n", "must be 64 lower-case hex digits"},
		{"user alice on #" + strings.Repeat("AB", 32) + "\n", "must be 64 lower-case hex digits"},
		{"user alice on %X~k\n", "key permissions are R, W or RW"},
		{"user alice on %R\n", "expected %R~pattern"},
		{"user alice on (~x +get)\n", "selectors"},
		{"user alice on +a|b|c\n", "expected +command"},
		{"user al\x01ice on\n", "printable ASCII"},
	} {
		_, err := Parse(strings.NewReader(c.text), "test.acl")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.text, err, c.want)
		}
	}
	for _, c := range []struct{ text, want string }{
		{"user alice on +nosuchcmd\n", "test.acl:1: user \"alice\", rule 2: unknown command \"nosuchcmd\""},
		{"user alice on >topsecret <othersecret\n", "rule 3: the password to remove"},
	} {
		specs, err := Parse(strings.NewReader(c.text), "test.acl")
		if err != nil {
			t.Fatal(err)
		}
		_, err = Compile(specs, "", testCommands)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%q) = %v, want an error containing %q", c.text, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error echoes a password: %v", err)
		}
	}
}

func TestCheckAllocations(t *testing.T) {
	a := compile(t, "user alice on >apw ~tenant-a:* %R~shared:* +@all -flushall &ch\n", "")
	u := a.User("alice")
	key, name, user, pass := []byte("tenant-b:zzz"), "get", []byte("alice"), []byte("apw")
	if n := testing.AllocsPerRun(100, func() {
		u.CanRun(name)
		u.CanKey(key, true, true)
		u.CanChannel(key, false)
	}); n != 0 {
		t.Fatalf("checks allocate %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { a.Authenticate(user, pass) }); n != 0 {
		t.Fatalf("Authenticate allocates %v times, want 0", n)
	}
}

func TestScriptingUsers(t *testing.T) {
	a := compile(t, "user a on ~x +@all\nuser b on ~x +@all -@scripting\nuser c on allkeys +@all\nuser d off ~x +@all\nuser e on ~x -@all +evalsha\n", "")
	if got := strings.Join(a.ScriptingUsers(), ","); got != "a,e" {
		t.Fatalf("ScriptingUsers = %q, want a,e", got)
	}
}
