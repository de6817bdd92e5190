package fault

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// TestKilledProxysLateHeartbeat: a fenceproxy killed while its heartbeat
// to Redis is held in the network (the delayed-write fault, which found
// this), restarted on the same data dir, and then the held heartbeat
// runs: the restarted proxy must not take its dead predecessor for a live
// copy of its data dir. Before, it did: it raised its token floor over the
// lease it had just granted (LOCK.RENEW answered null while the lease was
// certain) and refused lock commands.
func TestKilledProxysLateHeartbeat(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	relay := startHoldRelay(t, redis.Addr)
	// A long --replica-timeout makes members live for seconds (live-for is
	// two rounds, the replica timeout and a second), so that the killed
	// proxy's is still there when the restarted one first looks.
	args := []string{"--replica-timeout", "5s"}
	first := testenv.StartProxy(t, testenv.ProxyOptions{Backend: relay.addr(), Args: args})
	store := upstream.InfoField(string(testenv.Dial(t, first.Addr).Do("INFO", "fenceproxy")), "fence_store_id")
	if store == "" {
		t.Fatal("INFO fenceproxy has no fence_store_id")
	}

	held := relay.hold()
	member := store + "/" // a heartbeat's member begins so; nothing else it sends does
	deadline := time.Now().Add(10 * time.Second)
	for !holding(held, member) {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat of the first proxy held within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.Kill9()

	second := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, DataDir: first.DataDir, Args: args})
	c := testenv.Dial(t, second.Addr)
	token, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "late:1", "o1", "60000"))
	if !ok {
		t.Fatal("the restarted proxy granted nothing")
	}
	floor := upstream.InfoField(string(c.Do("INFO", "fenceproxy")), "token_floor")
	if floor == "" {
		t.Fatal("INFO fenceproxy has no token_floor")
	}

	direct := testenv.Dial(t, redis.Addr)
	direct.Do("SELECT", "15")
	live := func() map[string]string {
		els, _ := testenv.SplitArray(direct.Do("ZRANGE", "fenceproxy:lock:{authority}:live", "0", "-1", "WITHSCORES"))
		m := map[string]string{}
		for i := 0; i+1 < len(els); i += 2 {
			k, _ := testenv.ParseBulk(els[i])
			v, _ := testenv.ParseBulk(els[i+1])
			m[string(k)] = string(v)
		}
		return m
	}
	before := live()
	if len(before) != 2 {
		t.Fatalf("live members before the held heartbeat ran: %v; want the killed proxy's and the restarted one's", before)
	}

	var mine []*heldConn
	for _, hc := range held {
		if holding([]*heldConn{hc}, member) {
			mine = append(mine, hc)
		}
	}
	release(t, held, mine) // returns once Redis ran what the killed proxy's connections held

	// Two rounds of the restarted proxy after it: its member's score moves
	// twice. (The killed one's moved once, when its heartbeat ran.)
	last, moves := live(), map[string]int{}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatalf("no two heartbeat rounds of the restarted proxy within 20s: %v", moves)
		}
		time.Sleep(20 * time.Millisecond)
		now := live()
		done := false
		for m, score := range now {
			if last[m] != "" && score != last[m] {
				moves[m]++
				done = done || moves[m] >= 2
			}
		}
		last = now
		if done {
			break
		}
	}
	var killed string
	for m := range before {
		if moves[m] < 2 {
			killed = m
		}
	}
	if last[killed] == before[killed] {
		t.Fatalf("the held heartbeat did not move the killed proxy's member %q (%s): the test proves nothing", killed, before[killed])
	}

	if r := c.Do("LOCK.RENEW", "late:1", "o1", "60000"); string(r) != ":"+strconv.FormatInt(token, 10)+"\r\n" {
		t.Fatalf("LOCK.RENEW of the lease granted before the late heartbeat = %s, want :%d", testenv.ShowReply(r), token)
	}
	if r := c.Do("LOCK.ACQUIRE", "late:2", "o2", "60000"); r[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE after the late heartbeat = %s, want a token", testenv.ShowReply(r))
	}
	if now := upstream.InfoField(string(c.Do("INFO", "fenceproxy")), "token_floor"); now != floor {
		t.Fatalf("token_floor went from %s to %s", floor, now)
	}
	if log := second.Log(); strings.Contains(log, "predecessor is alive") {
		t.Fatalf("the restarted proxy took its killed predecessor for a live copy:\n%s", log)
	}
}
