// Package security_test checks fenceproxy's own client authentication and
// ACL users (--aclfile, --requirepass) against the real binary in front of a
// real redis-server: Redis 7.0's replies for NOAUTH, WRONGPASS and NOPERM
// (compared byte for byte with a redis-server given the same users), users
// confined to key patterns for keys and lock resources, locks bound to the
// user who took them, and passwords kept out of the log, INFO and metrics.
package security_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Passwords of the users below. Each is distinctive so that a search of the
// log or a reply for it cannot match anything else.
const (
	defaultPass = "dflt-Pa55-7c1e"
	alicePass   = "alice-Pa55-93fd"
	bobPass     = "bob-Pa55-0b7a"
	carolPass   = "carol-Pa55-55e2"
	erinPass    = "erin-Pa55-c0de"
	disPass     = "dis-Pa55-6a1f"
)

// users is the ACL file of most tests: two tenants' users that share
// tenant-a:*, a read-only-commands user, a pub/sub user, and a disabled one.
// The Redis part of each line (no @lock, which Redis does not know) is also
// loaded into a real redis-server to compare replies.
var users = []string{
	"user alice on >" + alicePass + " ~tenant-a:* %R~shared:* %W~inbox:* +@all -flushall",
	"user bob on >" + bobPass + " ~tenant-a:* ~tenant-b:* +@all",
	"user carol on >" + carolPass + " ~* -@all +get +ping",
	"user erin on >" + erinPass + " ~* resetchannels &news.* +@all",
	"user dis off >" + disPass + " ~* +@all",
}

// env is a master, fenceproxy in front of it with the users above and
// default's password from $FENCEPROXY_REQUIREPASS, and a second
// redis-server with the same users for comparison.
type env struct {
	master, twin *testenv.Redis
	proxy        *testenv.Proxy
}

// writeACL writes an ACL file for fenceproxy: a comment and a blank line
// (fenceproxy's extension: Redis 7.0's aclfile has no comments), then lines.
func writeACL(t *testing.T, lines ...string) string {
	t.Helper()
	return writeFile(t, "# fenceproxy test users\n\n"+strings.Join(lines, "\n")+"\n")
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startEnv(t *testing.T, extraArgs ...string) *env {
	t.Helper()
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	twinACL := writeFile(t, strings.Join(append([]string{"user default on >" + defaultPass + " ~* &* +@all"}, users...), "\n")+"\n")
	twin := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--aclfile", twinACL}})
	t.Setenv("FENCEPROXY_REQUIREPASS", defaultPass) // not on the command line
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{
		Backend: master.Addr,
		Args:    append([]string{"--aclfile", writeACL(t, users...), "--log-level", "debug"}, extraArgs...),
	})
	return &env{master: master, twin: twin, proxy: proxy}
}

// as opens a connection to the proxy authenticated as user (nil: none).
func (e *env) as(t *testing.T, user, pass string) *testenv.Conn {
	t.Helper()
	c := testenv.Dial(t, e.proxy.Addr)
	if user != "" {
		expect(t, c, "+OK\r\n", "AUTH", user, pass)
	}
	return c
}

// twinAs is as on the comparison redis-server.
func (e *env) twinAs(t *testing.T, user, pass string) *testenv.Conn {
	t.Helper()
	c := testenv.Dial(t, e.twin.Addr)
	if user != "" {
		expect(t, c, "+OK\r\n", "AUTH", user, pass)
	}
	return c
}

// expect sends args and fails unless the reply is exactly want.
func expect(t *testing.T, c *testenv.Conn, want string, args ...string) {
	t.Helper()
	if got := c.Do(args...); string(got) != want {
		t.Fatalf("%s: reply %q, want %q", testenv.ShowCommand(args), got, want)
	}
}

// Redis 7.0.15's replies (also compared live with the twin below).
const (
	replyNoAuth    = "-NOAUTH Authentication required.\r\n"
	replyWrongPass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
	replyNoPermKey = "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
	replyNoPermCh  = "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
	replyNull      = "$-1\r\n"
)

func noPerm(cmd string) string {
	return "-NOPERM this user has no permissions to run the '" + cmd + "' command\r\n"
}
