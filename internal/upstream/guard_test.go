package upstream

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// set runs SET key 1 on conn of n's pool and returns the reply as a client
// would read it (clientReads).
func set(t *testing.T, n *Node, key string) string {
	t.Helper()
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	n.pool(false).Conn(0).Do([][]byte{[]byte("SET"), []byte(key), []byte("1")}, p)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("SET %s: no reply within 5s", key)
	}
	return clientReads(t, p, "SET "+key)
}

// clientReads is p's reply as a client would read it: a refusal, which is
// the reply's Err, as its error reply.
func clientReads(t *testing.T, p *resp.Reply, what string) string {
	t.Helper()
	var re resp.Error
	if errors.As(p.Err, &re) {
		return string(resp.AppendError(nil, re.Code, re.Msg))
	} else if p.Err != nil {
		t.Fatalf("%s: %v", what, p.Err)
	}
	return string(p.Buf)
}

// lockScript runs script once on one of n's lock connections, served as
// the lock writer serves them (ServeLockWrites: once per node), and
// returns the reply as a client would read it (clientReads).
func lockScript(t *testing.T, n *Node, script string) string {
	t.Helper()
	replies := make(chan *resp.Reply, 1)
	var once sync.Once
	n.ServeLockWrites(func(conn *backend.SyncConn, acked bool) {
		once.Do(func() {
			p := resp.NewReplyFunc(func() {})
			req := resp.AppendCommand(nil, [][]byte{[]byte("EVAL"), []byte(script), []byte("0")})
			conn.Exchange(req, []*resp.Reply{p})
			replies <- p
		})
		<-n.Closed()
	})
	select {
	case p := <-replies:
		return clientReads(t, p, "EVAL on a lock connection")
	case <-time.After(5 * time.Second):
		t.Fatalf("EVAL on a lock connection: no reply within 5s")
		return ""
	}
}

func dbsize(t *testing.T, addr string) string {
	t.Helper()
	return string(testenv.Dial(t, addr).Do("DBSIZE"))
}

// TestGuardedNodeRefusesAReplica: a guarded node is not built on a
// replica, and one whose server comes back as a replica after its
// connections broke is refused at the reconnection, with nothing sent.
func TestGuardedNodeRefusesAReplica(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--replica-read-only", "no"}})
	replica := testenv.StartReplica(t, master)
	ctx := context.Background()
	opts := NodeOptions{Addr: replica.Addr, PoolSize: 1, WriterConns: 1, ReplicaTimeout: time.Second,
		Logger: slog.Default(), NotMaster: replyReplica}
	if _, err := NewNode(ctx, opts); !errors.Is(err, ErrNotMaster) {
		t.Fatalf("NewNode on a replica: err %v, want ErrNotMaster", err)
	}

	var changed atomic.Int32
	opts.Addr, opts.Changed = master.Addr, func() { changed.Add(1) }
	n, err := NewNode(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if r := set(t, n, "before"); r != "+OK\r\n" {
		t.Fatalf("SET on the master = %q", r)
	}
	// The server behind the address comes back as a replica of another
	// (one that writes to it would not refuse: replica-read-only no).
	other := testenv.StartRedis(t, testenv.RedisOptions{})
	master.Follow(t, other)
	master.Kill()
	master.Restart(t) // a replica of other again
	deadline := time.Now().Add(10 * time.Second)
	for n.Refusal() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the node still serves a replica after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if changed.Load() == 0 {
		t.Errorf("the owner was not told")
	}
	if r := set(t, n, "after"); !strings.HasPrefix(r, "-READONLY fenceproxy:") {
		t.Fatalf("SET through a refusing node = %q", r)
	}
	if r := lockScript(t, n, "return redis.call('SET', 'scripted', '1')"); !strings.HasPrefix(r, "-READONLY fenceproxy:") {
		t.Fatalf("a lock script through a refusing node's lock connection = %q", r)
	}
	if err := n.Client.Set(ctx, "client", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY fenceproxy") {
		t.Fatalf("the go-redis client through a refusing node: err %v", err)
	}
	if _, err := n.Pinned(false); !errors.Is(err, ErrNotMaster) {
		t.Fatalf("Pinned on a refusing node: err %v", err)
	}
	if r := testenv.Dial(t, master.Addr).Do("EXISTS", "after", "scripted", "client"); string(r) != ":0\r\n" {
		t.Fatalf("EXISTS on the replica = %q: a refused write reached it", r)
	}
}

// TestGuardedNodeAsksSentinelAfterABreak: the master is killed, Sentinel
// promotes its replica, and the old master comes back empty at its
// address, a master again. The node's reconnections find it answering
// ROLE master, ask Sentinel, and are refused: nothing reaches it.
func TestGuardedNodeAsksSentinelAfterABreak(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	sent := testenv.StartSentinels(t, master, testenv.SentinelOptions{})
	s := newSentinels(SentinelOptions{Addrs: sent.Addrs, MasterName: sent.MasterName})
	defer s.close()
	ctx := context.Background()
	n, err := NewNode(ctx, NodeOptions{Addr: master.Addr, PoolSize: 1, WriterConns: 1, ReplicaTimeout: time.Second,
		Logger: slog.Default(), NotMaster: replyFailover, Confirm: s.confirm})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if r := set(t, n, "before"); r != "+OK\r\n" {
		t.Fatalf("SET on the master = %q", r)
	}

	master.Kill()
	sent.WaitMaster(t, replica.Addr)
	master.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for n.Refusal() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the node did not refuse the old master within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := set(t, n, "after"); !strings.HasPrefix(r, "-TRYAGAIN fenceproxy:") {
		t.Fatalf("SET through a refusing node = %q", r)
	}
	if got := dbsize(t, master.Addr); got != ":0\r\n" {
		t.Fatalf("DBSIZE of the old master back empty = %q: something reached it", got)
	}
	if err := s.confirm(ctx, master.Addr); !errors.Is(err, ErrNotMaster) {
		t.Fatalf("confirm of the old master: %v, want ErrNotMaster", err)
	}
	if err := s.confirm(ctx, replica.Addr); err != nil {
		t.Fatalf("confirm of the promoted replica: %v", err)
	}
}
