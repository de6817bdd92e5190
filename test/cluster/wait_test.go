package cluster

import (
	"fmt"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestWaitCoversEveryMaster: a client's writes go to every master, so WAIT
// must count the replicas of each. With one replica per master WAIT 1
// answers 1; once one master's replica is gone, WAIT 1 answers 0 although
// the other masters' replicas acknowledged.
func TestWaitCoversEveryMaster(t *testing.T) {
	e := startEnv(t, 1, 0)
	st := readSlots(t, e.cl)
	c := e.dial(t)
	for _, m := range e.cl.Masters {
		k := st.keysOn(m, "wait:", 1)[0]
		if got := c.Do("SET", k, "v"); string(got) != "+OK\r\n" {
			t.Fatalf("SET %s: %q", k, got)
		}
	}
	if got := c.Do("WAIT", "1", "5000"); string(got) != ":1\r\n" {
		t.Fatalf("WAIT 1 5000 with a replica per master: %q, want :1", got)
	}

	// Stop the replica of the last master (SIGSTOP: it stays in the
	// cluster but acknowledges nothing).
	victim := e.cl.Replicas[len(e.cl.Replicas)-1]
	victim.Stop()
	defer victim.Cont()
	k := st.keysOn(e.cl.Masters[0], "wait:", 1)[0]
	c.Do("SET", k, "again")
	if got := c.Do("WAIT", "1", "300"); string(got) != ":0\r\n" {
		t.Fatalf("WAIT 1 300 with one master's replica stopped: %q, want :0", got)
	}
}

// TestRandomKeyFindsKeysOnAnyMaster: with every key on one master,
// RANDOMKEY through the proxy still answers one of them, never null.
func TestRandomKeyFindsKeysOnAnyMaster(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	c := e.dial(t)
	// The proxy's own keys (the token authority's) are the only others.
	if got := c.Do("RANDOMKEY"); string(got) != "$-1\r\n" {
		if b, _ := testenv.ParseBulk(got); !isAuthorityKey(string(b)) {
			t.Fatalf("RANDOMKEY on an empty cluster: %q, want a null or the token authority's key", got)
		}
	}
	// A master other than the one holding the authority's keys.
	var last *testenv.Redis
	for _, m := range e.cl.Masters {
		if m != st.of(authorityKeys[0]) {
			last = m
		}
	}
	k := st.keysOn(last, "rk:", 1)[0]
	c.Do("SET", k, "v")
	found := false
	for range 20 {
		got := c.Do("RANDOMKEY")
		b, ok := testenv.ParseBulk(got)
		if !ok || (string(b) != k && !isAuthorityKey(string(b))) {
			t.Fatalf("RANDOMKEY with one key on another master: %q, want %q (or the authority's keys)", got, k)
		}
		found = found || string(b) == k
	}
	if !found {
		t.Fatalf("RANDOMKEY never answered %q, the only client key, on another master than the authority's", k)
	}
}

// TestTransactionStraysToAnotherMaster: a transaction is bound to the master
// of its first queued key; a key on another master is refused at queue time
// (never a MOVED reaching the client) and EXEC aborts, as on Redis Cluster.
func TestTransactionStraysToAnotherMaster(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	a := st.keysOn(e.cl.Masters[0], "tx:", 1)[0]
	b := st.keysOn(e.cl.Masters[1], "tx:", 1)[0]
	c := e.dial(t)
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"SET", a, "1"}, "+QUEUED\r\n"},
		{[]string{"SET", b, "1"}, "-CROSSSLOT fenceproxy: this key is on another Redis Cluster master than the transaction's; keep a transaction's keys in one slot with a {hash tag}\r\n"},
		{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{[]string{"EXISTS", a}, ":0\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"EXEC"}, "*0\r\n"},
	} {
		if got := c.Do(step.args...); string(got) != step.want {
			t.Fatalf("%v: %q, want %q", step.args, got, step.want)
		}
	}
}

// TestPubsubCountsEveryMaster: PUBSUB through the proxy counts the
// subscribers of every master, as one node holding them all would.
func TestPubsubCountsEveryMaster(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	// One subscriber through the proxy, one straight on the last master.
	viaProxy := e.dial(t)
	viaProxy.Do("SUBSCRIBE", "ps:news")
	direct := testenv.Dial(t, e.cl.Masters[len(e.cl.Masters)-1].Addr)
	direct.Do("SUBSCRIBE", "ps:news")
	direct2 := testenv.Dial(t, e.cl.Masters[1].Addr)
	direct2.Do("PSUBSCRIBE", "ps:*")
	var shards []string
	for _, m := range e.cl.Masters[:2] {
		ch := st.keysOn(m, "ps:shard:", 1)[0]
		shards = append(shards, ch)
		s := e.dial(t)
		s.Do("SSUBSCRIBE", ch)
	}
	c := e.dial(t)
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"PUBSUB", "NUMSUB", "ps:news", "ps:none"}, "*4\r\n$7\r\nps:news\r\n:2\r\n$7\r\nps:none\r\n:0\r\n"},
		{[]string{"PUBSUB", "CHANNELS", "ps:n*"}, "*1\r\n$7\r\nps:news\r\n"},
		{[]string{"PUBSUB", "NUMPAT"}, ":1\r\n"},
		{[]string{"PUBSUB", "SHARDNUMSUB", shards[0]}, fmt.Sprintf("*2\r\n$%d\r\n%s\r\n:1\r\n", len(shards[0]), shards[0])},
	} {
		if got := c.Do(step.args...); string(got) != step.want {
			t.Fatalf("%v: %q, want %q", step.args, got, step.want)
		}
	}
	got, ok := testenv.SplitArray(c.Do("PUBSUB", "SHARDCHANNELS", "ps:shard:*"))
	if !ok || len(got) != 2 {
		t.Fatalf("PUBSUB SHARDCHANNELS: %q, want both shard channels", got)
	}
}
