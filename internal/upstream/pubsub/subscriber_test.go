package pubsub

import (
	"net"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// testMaster is a Master for the helpers' tests (never dialled).
type testMaster struct{ addr string }

func (m *testMaster) Tunnel(bool, int) (net.Conn, error) { return nil, nil }
func (m *testMaster) String() string                     { return m.addr }

// A shard confirmation's count is rewritten to the client's total, as one
// node would count it; the rest of the message stays as Redis wrote it.
func TestRewriteCount(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{"*3\r\n$10\r\nssubscribe\r\n$2\r\nch\r\n:1\r\n", "*3\r\n$10\r\nssubscribe\r\n$2\r\nch\r\n:12\r\n"},
		{">3\r\n$12\r\nsunsubscribe\r\n$1\r\nc\r\n:0\r\n", ">3\r\n$12\r\nsunsubscribe\r\n$1\r\nc\r\n:12\r\n"},
	} {
		elems, ok := resp.Elements([]byte(tc.msg))
		if !ok || len(elems) != 3 {
			t.Fatalf("resp.Elements(%q) = %q, %v", tc.msg, elems, ok)
		}
		if got := string(rewriteCount([]byte(tc.msg), elems, 12)); got != tc.want {
			t.Errorf("rewriteCount(%q, 12) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}

// pubsubMessage reads a message's kind and channel (a pmessage's channel,
// not its pattern); anything else is not one.
func TestPubsubMessage(t *testing.T) {
	for _, tc := range []struct {
		msg, kind, name, channel string
		ok                       bool
	}{
		{"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n", "message", "ch", "ch", true},
		{"*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$1\r\nx\r\n", "pmessage", "c*", "ch", true},
		{">3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n:1\r\n", "subscribe", "a", "a", true},
		{"+PONG\r\n", "", "", "", false},
		{"-ERR no\r\n", "", "", "", false},
		{"*2\r\n$4\r\npong\r\n$0\r\n\r\n", "", "", "", false},
	} {
		kind, name, channel, ok := pubsubMessage([]byte(tc.msg))
		if kind != tc.kind || string(name) != tc.name || string(channel) != tc.channel || ok != tc.ok {
			t.Errorf("pubsubMessage(%q) = %q, %q, %q, %v; want %q, %q, %q, %v",
				tc.msg, kind, name, channel, ok, tc.kind, tc.name, tc.channel, tc.ok)
		}
	}
}

// A subscriber that ends leaves the registry, but never takes the entry of
// a newer subscriber of the same client (a client that subscribed again).
func TestRegistryKeepsTheNewer(t *testing.T) {
	var r Registry[*testMaster]
	old, newer := &Subscriber[*testMaster]{id: 7}, &Subscriber[*testMaster]{id: 7}
	r.add(7, old)
	if r.Of(7) != old {
		t.Fatal("Of(7) after add: not the subscriber added")
	}
	r.add(7, newer)
	r.remove(7, old)
	if r.Of(7) != newer {
		t.Fatal("the old subscriber's remove took the newer one's entry")
	}
	r.remove(7, newer)
	if r.Of(7) != nil || r.Of(8) != nil {
		t.Fatal("Of after remove: want nil")
	}
}
