package cluster

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestSelectOnlyZero: in front of a Redis Cluster only database 0 exists;
// SELECT answers as a Redis Cluster node does, byte for byte.
func TestSelectOnlyZero(t *testing.T) {
	e := startEnv(t, -1, 0)
	proxy := e.dial(t)
	node := testenv.Dial(t, readSlots(t, e.cl).of("{a}k").Addr) // the key's master: no MOVED
	for _, cmd := range [][]string{
		{"SELECT", "0"}, {"SELECT", "1"}, {"SELECT", "15"}, {"SELECT", "-1"}, {"SELECT", "x"},
		{"SELECT", "99999999999"}, {"SET", "{a}k", "v"}, {"MOVE", "{a}k", "1"}, {"SWAPDB", "0", "1"},
		{"COPY", "{a}k", "{a}k2", "DB", "1"},
	} {
		got, want := proxy.Do(cmd...), node.Do(cmd...)
		if string(got) != string(want) {
			t.Errorf("%s:\n proxy %q\n redis %q", testenv.ShowCommand(cmd), got, want)
		}
	}
}
