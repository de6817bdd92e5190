package locking

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// The proxy's own keys (issue 22, item 4): a client's command that writes
// or deletes a key under --key-prefix is refused, and an owner record that
// carries a token no fence store issued is not adopted: its resource alone
// is refused, with an error that says what to do, and every other
// resource is granted, also after a restart.

// foreignToken is 2^53-2: adopted, it left one token before the end of the
// token space.
const foreignToken = 9007199254740990

// ownKeyRefusal starts the reply to a refused write of key.
func ownKeyRefusal(key string) string {
	return "-ERR fenceproxy: key '" + key + "' belongs to fenceproxy's lock family"
}

// foreignRecord is an owner record in the layout the lock scripts write
// (internal/locks/scripts.go: token term acquired renewed addr-length addr
// owner) with token tok, held by mallory.
func foreignRecord(tok int64) string {
	addr := "127.0.0.1:4242"
	return fmt.Sprintf("%d 0 1700000000000 1700000000000 %d %smallory", tok, len(addr), addr)
}

// refusedOwnWrite sends args, which must be refused for writing key.
func refusedOwnWrite(t *testing.T, c *testenv.Conn, key string, args ...string) {
	t.Helper()
	if r := c.Do(args...); !strings.HasPrefix(string(r), ownKeyRefusal(key)) {
		t.Fatalf("%s = %s, want %q...", testenv.ShowCommand(args), testenv.ShowReply(r), ownKeyRefusal(key))
	}
}

// TestOwnKeysWritesRefused: through the proxy, every way to write or
// delete an owner record, a guard or the token authority's keys is
// refused (plain, pipelined on the serve loop, in a goroutine, RESP3,
// inside MULTI, inside FENCE.EXEC), nothing reaches Redis, reads are
// served, and locks are granted as before.
func TestOwnKeysWritesRefused(t *testing.T) {
	for _, loop := range []bool{true, false} {
		t.Run(fmt.Sprintf("serve-loop=%v", loop), func(t *testing.T) {
			master := testenv.StartRedis(t, testenv.RedisOptions{})
			p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0,
				Args: []string{"--serve-loop=" + strconv.FormatBool(loop)}})
			c := testenv.Dial(t, p.Addr)
			direct := testenv.Dial(t, master.Addr)
			x := recordKey("x")

			// The write: a record with a token near the end.
			refusedOwnWrite(t, c, x, "SET", x, foreignRecord(foreignToken), "PX", "2000")
			if r := direct.Do("EXISTS", x); string(r) != ":0\r\n" {
				t.Fatalf("EXISTS %s on Redis after the refused SET = %s, want 0", x, testenv.ShowReply(r))
			}
			tok := token(t, c, "LOCK.ACQUIRE", "x", "alice", "60000")
			if tok >= foreignToken {
				t.Fatalf("LOCK.ACQUIRE x = %d, want a token far below %d", tok, int64(foreignToken))
			}

			// Reads are served.
			if r := c.Do("GET", x); !strings.HasPrefix(string(r), "$") || !strings.Contains(string(r), "alice") {
				t.Fatalf("GET %s = %s, want alice's record", x, testenv.ShowReply(r))
			}
			for _, args := range [][]string{{"TYPE", x}, {"PTTL", x}, {"EXISTS", x}, {"DUMP", x},
				{"EVAL_RO", "return redis.call('GET', KEYS[1])", "1", x}, {"COPY", x, "copied"}} {
				if r := c.Do(args...); r[0] == '-' {
					t.Fatalf("%s = %s, want it served", testenv.ShowCommand(args), testenv.ShowReply(r))
				}
			}

			// Writes and deletes, of records, guards and the authority's
			// keys, by every kind of declared key.
			bound := "fenceproxy:lock:{authority}:bound"
			c.Do("SET", "k", "v")
			c.Do("SADD", "set", "m")
			for _, w := range []struct {
				key  string
				args []string
			}{
				{x, []string{"DEL", "k", x}},
				{x, []string{"UNLINK", x}},
				{x, []string{"EXPIRE", x, "1"}},
				{x, []string{"RENAME", "k", x}},
				{x, []string{"RENAME", x, "k2"}}, // the source is deleted
				{x, []string{"RENAMENX", "k", x}},
				{x, []string{"COPY", "k", x, "REPLACE"}},
				{x, []string{"RESTORE", x, "0", "payload", "REPLACE"}},
				{x, []string{"MOVE", x, "3"}},
				{x, []string{"SMOVE", "set", x, "m"}},
				{x, []string{"LMOVE", "list", x, "LEFT", "RIGHT"}},
				{x, []string{"SORT", "list", "STORE", x}},
				{x, []string{"MIGRATE", "127.0.0.1", "1", x, "0", "1000"}},
				{x, []string{"MIGRATE", "127.0.0.1", "1", "", "0", "1000", "KEYS", "k", x}},
				{x, []string{"EVAL", "return redis.call('DEL', KEYS[1])", "1", x}},
				{x, []string{"EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "1", x}},
				{x, []string{"FCALL", "f", "1", x}},
				{x + ":delay", []string{"SET", x + ":delay", "1"}},
				{bound, []string{"DEL", bound}},
				{bound, []string{"HSET", bound, "bound", "1"}},
				{x, []string{"MSET", "a", "1", x, "2"}},
			} {
				refusedOwnWrite(t, c, w.key, w.args...)
			}
			if r := direct.Do("GET", x); !strings.Contains(string(r), "alice") {
				t.Fatalf("GET %s on Redis after the refused writes = %s, want alice's record still", x, testenv.ShowReply(r))
			}

			// FENCE.EXEC's command is checked as if sent alone.
			refusedOwnWrite(t, c, x, "FENCE.EXEC", "x", strconv.FormatInt(tok, 10), "DEL", x)

			// Pipelined beside plain requests.
			c.Send("GET", "k")
			c.Send("SET", x, "v")
			c.Send("GET", "k")
			c.Flush()
			for i, want := range []string{"$1\r\nv\r\n", ownKeyRefusal(x), "$1\r\nv\r\n"} {
				r, err := c.ReadReply()
				if err != nil || !strings.HasPrefix(string(r), want) {
					t.Fatalf("pipelined reply %d = %s (%v), want %q...", i, testenv.ShowReply(r), err, want)
				}
			}

			// Inside MULTI: refused while queueing, and EXEC aborts.
			tx := testenv.Dial(t, p.Addr)
			tx.Do("MULTI")
			if r := tx.Do("SET", "k", "in-tx"); string(r) != "+QUEUED\r\n" {
				t.Fatalf("SET k inside MULTI = %s", testenv.ShowReply(r))
			}
			refusedOwnWrite(t, tx, x, "DEL", x)
			if r := tx.Do("EXEC"); !strings.HasPrefix(string(r), "-EXECABORT") {
				t.Fatalf("EXEC after a refused command = %s, want -EXECABORT", testenv.ShowReply(r))
			}
			if r := c.Do("GET", "k"); string(r) != "$1\r\nv\r\n" {
				t.Fatalf("GET k after the aborted transaction = %s, want v", testenv.ShowReply(r))
			}

			// RESP3.
			r3 := testenv.Dial(t, p.Addr)
			r3.Do("HELLO", "3")
			refusedOwnWrite(t, r3, x, "SET", x, "v")
			if r := r3.Do("GET", x); !strings.Contains(string(r), "alice") {
				t.Fatalf("RESP3 GET %s = %s", x, testenv.ShowReply(r))
			}

			if got := metricLine(t, p, "fenceproxy_own_key_writes_refused_total"); got == "" || got == "0" {
				t.Fatalf("fenceproxy_own_key_writes_refused_total = %q, want the refusals counted", got)
			}
			// The lock family works as before.
			c.Do("LOCK.RELEASE", "x", "alice")
			if next := token(t, c, "LOCK.ACQUIRE", "x", "bob", "60000"); next <= tok {
				t.Fatalf("LOCK.ACQUIRE x after the release = %d, want above %d", next, tok)
			}
		})
	}
}

// TestForeignRecordTokenNotAdopted: an owner record written straight into
// Redis (bypassing the proxy) with a token no fence store issued refuses
// its resource alone, with an error that names the key to delete; every
// other resource is still granted, also after a restart; once the record
// is deleted, the resource is granted a token of the ordinary sequence.
func TestForeignRecordTokenNotAdopted(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	before := token(t, c, "LOCK.ACQUIRE", "warmup", "o", "60000")

	direct := testenv.Dial(t, master.Addr)
	x := recordKey("x")
	if r := direct.Do("SET", x, foreignRecord(foreignToken), "PX", "600000"); string(r) != "+OK\r\n" {
		t.Fatalf("SET %s on Redis = %s", x, testenv.ShowReply(r))
	}
	foreignRefused := func(r []byte) {
		t.Helper()
		if s := string(r); !strings.HasPrefix(s, "-ERR fenceproxy: ") || !strings.Contains(s, strconv.FormatInt(foreignToken, 10)) ||
			!strings.Contains(s, "no fenceproxy issued") || !strings.Contains(s, "delete key '"+x+"'") {
			t.Fatalf("LOCK.ACQUIRE x over a foreign record = %q, want an error naming the token and the key to delete", s)
		}
	}
	for round := range 2 {
		first := c.Do("LOCK.ACQUIRE", "x", "alice", "60000")
		for i := range 3 {
			r := "other-" + strconv.Itoa(round) + "-" + strconv.Itoa(i)
			if tok := token(t, c, "LOCK.ACQUIRE", r, "o", "60000"); tok <= before || tok >= foreignToken {
				t.Fatalf("round %d: LOCK.ACQUIRE %s = %d, want a token above %d, far below %d", round, r, tok, before, int64(foreignToken))
			}
		}
		foreignRefused(first)
		foreignRefused(c.Do("LOCK.ACQUIRE", "x", "alice", "60000")) // not adopted the first time either
		if got := metricLine(t, p, "fenceproxy_lock_foreign_tokens_total"); got == "" || got == "0" {
			t.Fatalf("round %d: fenceproxy_lock_foreign_tokens_total = %q, want the refusals counted", round, got)
		}
		if round == 0 {
			p.Restart(t)
			c = testenv.Dial(t, p.Addr)
		}
	}
	if !strings.Contains(p.Log(), "no fence store issued") {
		t.Fatalf("the proxy's log does not report the foreign token")
	}

	// The operator's way out: delete the record in Redis.
	direct.Do("DEL", x)
	if tok := token(t, c, "LOCK.ACQUIRE", "x", "alice", "60000"); tok >= foreignToken {
		t.Fatalf("LOCK.ACQUIRE x after the record was deleted = %d, want an ordinary token", tok)
	}
}

// TestOwnKeysInFrontOfCluster: in front of a Redis Cluster, a write of an
// owner record through the proxy is refused, a read is served, and a
// foreign record written on its slot's master refuses only its resource.
func TestOwnKeysInFrontOfCluster(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: cl.Seeds(), MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	x := recordKey("x")
	refusedOwnWrite(t, c, x, "SET", x, foreignRecord(foreignToken), "PX", "2000")
	refusedOwnWrite(t, c, x, "EVAL", "return 1", "1", x)
	tok := token(t, c, "LOCK.ACQUIRE", "x", "alice", "60000")
	if r := c.Do("GET", x); !strings.Contains(string(r), "alice") {
		t.Fatalf("GET %s = %s, want alice's record", x, testenv.ShowReply(r))
	}
	c.Do("LOCK.RELEASE", "x", "alice")

	y := recordKey("y")
	direct := testenv.Dial(t, cl.MasterForSlot(t, testenv.KeySlot(y)).Addr)
	direct.Do("SET", y, foreignRecord(foreignToken), "PX", "600000")
	first := string(c.Do("LOCK.ACQUIRE", "y", "bob", "60000"))
	for _, r := range []string{"x", "z"} {
		if got := token(t, c, "LOCK.ACQUIRE", r, "carol", "60000"); got <= tok || got >= foreignToken {
			t.Fatalf("LOCK.ACQUIRE %s = %d, want above %d, far below %d", r, got, tok, int64(foreignToken))
		}
	}
	if !strings.Contains(first, "no fenceproxy issued") {
		t.Fatalf("LOCK.ACQUIRE y over a foreign record = %q, want the foreign-token error", first)
	}
}
