package security_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestREADMEExample starts fenceproxy with the ACL file shown in README.md
// and checks what the README says of it: default is off, so nothing runs
// before AUTH; tenant-a (password "tenant-a-secret", given as its SHA-256)
// works in tenant-a:* only and may not run @dangerous commands;
// tenant-a-reader reads tenant-a:* and inspects its locks, nothing else.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "# /etc/fenceproxy/users.acl")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no example ACL file")
	}
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	t.Setenv("FENCEPROXY_REQUIREPASS", "")
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{
		Backend: master.Addr,
		Args:    []string{"--aclfile", writeFile(t, "#"+block)},
	})
	c := testenv.Dial(t, proxy.Addr)
	expect(t, c, replyNoAuth, "PING")
	expect(t, c, "+OK\r\n", "AUTH", "tenant-a", "tenant-a-secret")
	expect(t, c, "+OK\r\n", "SET", "tenant-a:k", "v")
	expect(t, c, replyNoPermKey, "SET", "tenant-b:k", "v")
	expect(t, c, noPerm("flushall"), "FLUSHALL")
	expect(t, c, noPerm("eval"), "EVAL", "return 1", "0")
	if tok, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "tenant-a:job", "w1", "10000")); !ok || tok <= 0 {
		t.Fatal("tenant-a cannot lock tenant-a:job")
	}
	r := testenv.Dial(t, proxy.Addr)
	expect(t, r, "+OK\r\n", "AUTH", "tenant-a-reader", "reader-secret")
	expect(t, r, "$1\r\nv\r\n", "GET", "tenant-a:k")
	expect(t, r, noPerm("set"), "SET", "tenant-a:k", "w")
	expect(t, r, noPerm("lock.acquire"), "LOCK.ACQUIRE", "tenant-a:job", "w1", "10000")
	info, err := testenv.ParseLockInfo(r.Do("LOCK.INFO", "tenant-a:job"))
	if err != nil || string(info.Owner) != "(held by another user)" {
		t.Fatalf("tenant-a-reader's LOCK.INFO: %+v %v", info, err)
	}
	expect(t, r, replyWrongPass, "AUTH", "default", "")
}
