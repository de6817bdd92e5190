package locking

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestFenceExecRefusesStaleHolder is the paused-holder case end to end: A
// holds a short lease and "pauses" past it, B is granted the resource, and
// A's fenced write is refused (-STALE) and never lands, while B's runs with
// the command's own reply.
func TestFenceExecRefusesStaleHolder(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)

	ta, _ := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "order:7", "worker-a", "200"))
	if r := c.Do("FENCE.EXEC", "order:7", strconv.FormatInt(ta, 10), "SET", "order:7:state", "paid-by-a"); string(r) != "+OK\r\n" {
		t.Fatalf("the holder's fenced SET = %q", r)
	}
	time.Sleep(300 * time.Millisecond) // A pauses past its lease
	tb, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "order:7", "worker-b", "5000"))
	if !ok || tb <= ta {
		t.Fatalf("B's token %d after A's %d", tb, ta)
	}
	// A wakes up and writes with its old token: refused, not run.
	r := c.Do("FENCE.EXEC", "order:7", strconv.FormatInt(ta, 10), "SET", "order:7:state", "late-write-by-a")
	if !strings.HasPrefix(string(r), "-STALE ") {
		t.Fatalf("stale FENCE.EXEC = %q, want -STALE", r)
	}
	if got := c.Do("GET", "order:7:state"); string(got) != "$9\r\npaid-by-a\r\n" {
		t.Fatalf("state after the stale write = %q: it landed", got)
	}
	// B's writes run and answer as the command does.
	tok := strconv.FormatInt(tb, 10)
	for _, tc := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"SET", "order:7:state", "shipped"}, "+OK\r\n"},
		{[]string{"GET", "order:7:state"}, "$7\r\nshipped\r\n"},
		{[]string{"INCR", "order:7:state"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"HSET", "order:7:h", "a", "1"}, ":1\r\n"},
		{[]string{"HGETALL", "order:7:h"}, "*2\r\n$1\r\na\r\n$1\r\n1\r\n"},
		{[]string{"GET", "missing"}, "$-1\r\n"},
	} {
		if got := c.Do(append([]string{"FENCE.EXEC", "order:7", tok}, tc.cmd...)...); string(got) != tc.want {
			t.Errorf("FENCE.EXEC %v = %q, want %q", tc.cmd, got, tc.want)
		}
	}
	for _, bad := range [][]string{
		{"FENCE.EXEC", "order:7", "0", "GET", "x"},
		{"FENCE.EXEC", "order:7", strconv.FormatInt(tb+1000, 10), "GET", "x"},
		{"FENCE.EXEC", "never-locked", "1", "GET", "x"},
		{"FENCE.EXEC", "order:7", tok},
	} {
		if got := c.Do(bad...); !strings.HasPrefix(string(got), "-ERR") {
			t.Errorf("%v = %q, want -ERR", bad, got)
		}
	}
}
