package testenv

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestClusterKeySlotKnownValues(t *testing.T) {
	for _, tc := range []struct {
		key  string
		slot int
	}{
		{"123456789", 0x31C3}, // the CRC-16/XMODEM check value
		{"", 0},
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", KeySlot("user1000")},
		{"{user1000}.followers", KeySlot("user1000")},
		{"foo{}{bar}", KeySlot("foo{}{bar}")},
		{"foo{{bar}}zap", KeySlot("{bar")},
		{"foo{bar}{zap}", KeySlot("bar")},
		{"{}", KeySlot("{}")},
		{"}{x}", KeySlot("x")},
	} {
		if got := KeySlot(tc.key); got != tc.slot {
			t.Errorf("KeySlot(%q) = %d, want %d", tc.key, got, tc.slot)
		}
	}
	if KeySlot("{}") == KeySlot("") {
		t.Errorf("KeySlot(\"{}\") hashes the empty tag; an empty tag must hash the whole key")
	}
}

// keySlotCorpus is a few hundred keys for comparing KeySlot with CLUSTER
// KEYSLOT: plain, tagged, empty tags, nested and unbalanced braces, binary.
func keySlotCorpus() []string {
	keys := []string{
		"", "{", "}", "{}", "}{", "{{}}", "{{}", "{}}", "{a", "a}", "a{b", "a}b{c}",
		"{a}", "{a}{b}", "{}{a}", "a{}b{c}", "{{a}}", "{a{b}c}", "x{a{b}}y", "{ }",
		"{\x00}", "\x00", "\xff\xfe{\xff}", "user:{1000}:name", "{user:1000}",
		"foo{{bar}}zap", "foo{bar}{zap}", "foo{}{bar}",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcxyz019:{}{}-_ \x00\x7f\x80\xff"
	for i := 0; i < 300; i++ {
		n := rng.IntN(20)
		b := make([]byte, n)
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		keys = append(keys, string(b), fmt.Sprintf("key:%d", i), fmt.Sprintf("{tag%d}:%d", i%7, i))
	}
	return keys
}

// TestCluster starts a 3+3 cluster, checks KeySlot and the slot map against
// the servers, then SIGKILLs a master and waits for its replica to take over.
func TestCluster(t *testing.T) {
	begin := time.Now()
	c := StartCluster(t, ClusterOptions{})
	t.Logf("StartCluster (3+3): %v", time.Since(begin).Round(time.Millisecond))
	if len(c.Masters) != 3 || len(c.Replicas) != 3 || len(c.Nodes) != 6 {
		t.Fatalf("got %d masters, %d replicas, %d nodes; want 3, 3, 6", len(c.Masters), len(c.Replicas), len(c.Nodes))
	}
	if seeds := strings.Split(c.Seeds(), ","); len(seeds) != 3 || seeds[0] != c.Masters[0].Addr {
		t.Fatalf("Seeds() = %q", c.Seeds())
	}

	// KeySlot agrees with CLUSTER KEYSLOT, pipelined on one node.
	keys := keySlotCorpus()
	conn := Dial(t, c.Replicas[0].Addr)
	for _, k := range keys {
		conn.Send("CLUSTER", "KEYSLOT", k)
	}
	conn.Flush()
	for _, k := range keys {
		reply, err := conn.ReadReply()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		want, ok := ParseInt(reply)
		if !ok {
			t.Fatalf("CLUSTER KEYSLOT %q replied %q", k, reply)
		}
		if got := KeySlot(k); got != int(want) {
			t.Errorf("KeySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
	t.Logf("KeySlot agrees with CLUSTER KEYSLOT on %d keys", len(keys))

	// SET and GET each key on the master CLUSTER SLOTS names; every other
	// master answers MOVED to it.
	conns := map[*Redis]*Conn{}
	for _, m := range c.Masters {
		conns[m] = Dial(t, m.Addr)
	}
	perMaster := map[*Redis][]string{}
	for i := 0; i < 150; i++ {
		key := fmt.Sprintf("k:%d", i)
		slot := KeySlot(key)
		m := c.MasterForSlot(t, slot)
		if _, ok := conns[m]; !ok {
			t.Fatalf("MasterForSlot(%d) = %s, not one of Masters", slot, m.Addr)
		}
		if reply := conns[m].Do("SET", key, "v"+strconv.Itoa(i)); string(reply) != "+OK\r\n" {
			t.Fatalf("SET %s on %s: %q", key, m.Addr, reply)
		}
		perMaster[m] = append(perMaster[m], key)
		for other, oc := range conns {
			want := fmt.Sprintf("-MOVED %d %s\r\n", slot, m.Addr)
			if other == m {
				want = fmt.Sprintf("$%d\r\nv%d\r\n", len("v"+strconv.Itoa(i)), i)
			}
			if reply := oc.Do("GET", key); string(reply) != want {
				t.Fatalf("GET %s (slot %d) on %s: %q, want %q", key, slot, other.Addr, reply, want)
			}
		}
	}
	for _, m := range c.Masters {
		if len(perMaster[m]) == 0 {
			t.Fatalf("no key of 150 landed on %s", m.Addr)
		}
	}

	// SIGKILL a master once its replica has the keys; its replica is
	// promoted and serves them.
	victim := c.Masters[1]
	var heir *Redis
	for _, r := range c.Replicas {
		info, err := infoReplication(r.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if infoField(info, "master_port") == strconv.Itoa(victim.Port) {
			heir = r
		}
	}
	if heir == nil {
		t.Fatalf("no replica of %s among %d replicas", victim.Addr, len(c.Replicas))
	}
	if n, ok := ParseInt(conns[victim].Do("WAIT", "1", "2000")); !ok || n != 1 {
		t.Fatalf("WAIT 1 on %s: %d replicas acknowledged", victim.Addr, n)
	}
	killed := time.Now()
	victim.Kill()
	c.WaitHealthy(t)
	t.Logf("failover: %s killed, %s promoted, cluster healthy after %v",
		victim.Addr, heir.Addr, time.Since(killed).Round(time.Millisecond))
	if len(c.Masters) != 3 || len(c.Replicas) != 2 {
		t.Fatalf("after failover: %d masters, %d replicas; want 3, 2", len(c.Masters), len(c.Replicas))
	}
	for _, m := range c.Masters {
		if m == victim {
			t.Fatalf("killed master %s still listed among Masters", victim.Addr)
		}
	}
	if !strings.Contains(c.Seeds(), heir.Addr) || strings.Contains(c.Seeds(), victim.Addr) {
		t.Fatalf("Seeds() after failover = %q; want %s in, %s out", c.Seeds(), heir.Addr, victim.Addr)
	}
	hc := Dial(t, heir.Addr)
	for _, key := range perMaster[victim] {
		if m := c.MasterForSlot(t, KeySlot(key)); m != heir {
			t.Fatalf("slot of %s is on %s after failover, want %s", key, m.Addr, heir.Addr)
		}
		if reply := hc.Do("GET", key); IsNull(reply) || reply[0] != '$' {
			t.Fatalf("GET %s on promoted %s: %q", key, heir.Addr, reply)
		}
	}
	t.Logf("TestCluster total: %v", time.Since(begin).Round(time.Millisecond))
}
