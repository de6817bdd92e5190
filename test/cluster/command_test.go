package cluster

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestCommandDescribesLockFamily: in front of a Redis Cluster too, COMMAND
// answers Redis's commands and the lock family (one master's COMMAND, the
// proxy's own entries added), in both protocols.
func TestCommandDescribesLockFamily(t *testing.T) {
	e := startEnv(t, -1, 0)
	proxy := e.dial(t)
	direct := testenv.Dial(t, e.cl.Masters[0].Addr)
	redisCount, _ := testenv.ParseInt(direct.Do("COMMAND", "COUNT"))
	count, _ := testenv.ParseInt(proxy.Do("COMMAND", "COUNT"))
	if count <= redisCount {
		t.Errorf("COMMAND COUNT via the proxy %d, a master's %d: want the lock family added", count, redisCount)
	}
	for _, hello := range []string{"2", "3"} {
		if r := proxy.Do("HELLO", hello); len(r) == 0 || r[0] == '-' {
			t.Fatalf("HELLO %s: %q", hello, r)
		}
		entries, ok := testenv.SplitArray(proxy.Do("COMMAND"))
		if !ok || int64(len(entries)) != count {
			t.Errorf("RESP%s: COMMAND has %d entries, COMMAND COUNT %d", hello, len(entries), count)
		}
		info, ok := testenv.SplitArray(proxy.Do("COMMAND", "INFO", "get", "lock.acquire"))
		if !ok || len(info) != 2 || !strings.Contains(string(info[0]), "\r\nget\r\n") || !strings.Contains(string(info[1]), "\r\nlock.acquire\r\n") {
			t.Errorf("RESP%s: COMMAND INFO get lock.acquire = %q", hello, info)
		}
	}
}
