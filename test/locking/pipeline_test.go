package locking

import (
	"strconv"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestPipelinedLockRequestsRunInOrder: a client's pipelined requests for one
// resource take effect in the order sent, even though the proxy serves lock
// requests concurrently.
func TestPipelinedLockRequestsRunInOrder(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	for i := 0; i < 50; i++ {
		r := "pipe-" + strconv.Itoa(i)
		c.Send("LOCK.ACQUIRE", r, "a", "10000")
		c.Send("LOCK.RELEASE", r, "a")
		c.Send("LOCK.ACQUIRE", r, "b", "10000")
		c.Send("LOCK.INFO", r)
		c.Send("LOCK.RELEASE", r, "b")
		c.Flush()
		read := func() []byte {
			b, err := c.ReadReply()
			if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			return b
		}
		ta, ok := testenv.ParseInt(read())
		if !ok {
			t.Fatalf("%s: first ACQUIRE gave no token", r)
		}
		if rel := read(); string(rel) != ":1\r\n" {
			t.Fatalf("%s: pipelined RELEASE after ACQUIRE = %q, want :1 (ran before the acquire?)", r, rel)
		}
		tb, ok := testenv.ParseInt(read())
		if !ok || tb <= ta {
			t.Fatalf("%s: second ACQUIRE gave %d after %d", r, tb, ta)
		}
		info, _ := testenv.SplitArray(read())
		if len(info) < 8 || string(info[1]) != "$1\r\nb\r\n" {
			t.Fatalf("%s: LOCK.INFO after the second ACQUIRE = %q, want owner b", r, info)
		}
		if rel := read(); string(rel) != ":1\r\n" {
			t.Fatalf("%s: final RELEASE = %q", r, rel)
		}
		// FENCE.CHECK right behind an ACQUIRE sees the new token.
		c.Send("LOCK.ACQUIRE", r, "c", "10000")
		c.Send("FENCE.CHECK", r, strconv.FormatInt(tb, 10))
		c.Flush()
		read()
		if fc := read(); string(fc) != ":0\r\n" {
			t.Fatalf("%s: FENCE.CHECK of the previous token right after a pipelined ACQUIRE = %q, want :0", r, fc)
		}
	}
}
