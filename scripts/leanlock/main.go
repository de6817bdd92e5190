// Command leanlock is a floor for fenceproxy's lock cycle, not a lock
// service: the least a proxy can do for LOCK.ACQUIRE and LOCK.RELEASE and
// still pay the three costs the contract puts on every grant:
//
//   - the owner record in Redis, acknowledged by --min-replicas replicas:
//     one batched EVALSHA and one WAIT per round, on one connection;
//   - the token synced to disk before the reply: one synced Pebble batch
//     per round (the token as the resource's newest, and the counter), in
//     fenceproxy's Pebble settings and keys (internal/tokenstate);
//   - a reply to each client, a goroutine per client (redcon).
//
// Nothing else: no waiting lines, no lease margin, no fence marks, no
// reservations a refusal can take back, no metrics, no recovery, a new
// token for a same-owner re-acquire, and one Redis server. It exists so
// that what fenceproxy's lock cycle costs can be held against a floor
// measured on the same machine in the same run (issue 26):
//
//	go build -o /tmp/leanlock ./scripts/leanlock
//	scripts/lock-ab.sh /tmp/leanlock bin/fenceproxy distinct 4
//
// It takes fenceproxy's flags that lock-ab.sh passes (--listen, --backend,
// --data-dir, --key-prefix, --min-replicas; --lock-keys and
// --metrics-listen are accepted and ignored).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// roundScript runs a round's operations: ARGV is (kind, key, owner, ttl)
// four at a time, kind "a" (acquire: set if free, re-arm if the owner's)
// or "r" (release: delete if the owner's). One result per operation: 1
// done, 0 not.
const roundScript = `
local out = {}
for i = 1, #ARGV, 4 do
  local key, owner = ARGV[i+1], ARGV[i+2]
  local cur = redis.call('GET', key)
  if ARGV[i] == 'a' then
    if not cur then
      redis.call('SET', key, owner, 'PX', ARGV[i+3])
      out[#out+1] = 1
    elseif cur == owner then
      redis.call('PEXPIRE', key, ARGV[i+3])
      out[#out+1] = 1
    else
      out[#out+1] = 0
    end
  elseif cur == owner then
    redis.call('DEL', key)
    out[#out+1] = 1
  else
    out[#out+1] = 0
  end
end
return out`

// op is one client's request, waiting for its round.
type op struct {
	acquire  bool
	resource string
	owner    string
	ttl      string
	reply    chan int64 // the token, 1 for a release, 0 refused, -1 failed
}

type lean struct {
	rdb         *redis.Client
	db          *pebble.DB
	sha         string
	prefix      string
	minReplicas int
	ops         chan *op
	last        uint64
}

func main() {
	listen := flag.String("listen", "127.0.0.1:7380", "address to serve on")
	backend := flag.String("backend", "127.0.0.1:6379", "the Redis master")
	dataDir := flag.String("data-dir", "leanlock-data", "the Pebble directory")
	prefix := flag.String("key-prefix", "lean:", "owner record key prefix")
	minReplicas := flag.Int("min-replicas", 1, "WAIT for this many replicas after each round")
	flag.String("lock-keys", "", "ignored (fenceproxy's)")
	flag.String("metrics-listen", "", "ignored (fenceproxy's)")
	flag.Parse()

	// fenceproxy's Pebble settings and keys (internal/tokenstate): the floor
	// pays for its disk what fenceproxy's store would for one entry a grant.
	db, err := pebble.Open(*dataDir, tokenstate.PebbleOptions())
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: *backend, PoolSize: 4})
	sha, err := rdb.ScriptLoad(context.Background(), roundScript).Result()
	if err != nil {
		log.Fatalf("leanlock: SCRIPT LOAD on %s: %v", *backend, err)
	}
	l := &lean{rdb: rdb, db: db, sha: sha, prefix: *prefix, minReplicas: *minReplicas, ops: make(chan *op, 4096)}
	if v, closer, err := db.Get(tokenstate.BoundKey); err == nil {
		l.last, _ = tokenstate.DecodeToken(v)
		closer.Close()
	}
	go l.rounds()
	log.Fatal(redcon.ListenAndServe(*listen, l.serve, nil, nil))
}

// serve is a client's command, on its goroutine: it waits for the round
// that carries it.
func (l *lean) serve(conn redcon.Conn, cmd redcon.Command) {
	name := strings.ToUpper(string(cmd.Args[0]))
	switch {
	case name == "PING":
		conn.WriteString("PONG")
		return
	case name == "LOCK.ACQUIRE" && len(cmd.Args) >= 4, name == "LOCK.RELEASE" && len(cmd.Args) == 3:
	default:
		conn.WriteError("ERR leanlock serves PING, LOCK.ACQUIRE resource owner ttl-ms and LOCK.RELEASE resource owner")
		return
	}
	reply, _ := conn.Context().(chan int64)
	if reply == nil {
		reply = make(chan int64, 1)
		conn.SetContext(reply)
	}
	o := &op{acquire: name == "LOCK.ACQUIRE", resource: string(cmd.Args[1]), owner: string(cmd.Args[2]), reply: reply}
	if o.acquire {
		o.ttl = string(cmd.Args[3])
	}
	l.ops <- o
	switch n := <-reply; {
	case n < 0:
		conn.WriteError("ERR leanlock: the round failed")
	case n == 0 && o.acquire:
		conn.WriteNull()
	default:
		conn.WriteInt64(n)
	}
}

// rounds runs one round at a time: every request that came while the last
// one ran, in one script call and one WAIT, then one synced batch.
func (l *lean) rounds() {
	ctx := context.Background()
	conn := l.rdb.Conn()
	var batch []*op
	var args []any
	for {
		batch = append(batch[:0], <-l.ops)
	more:
		for len(batch) < 512 {
			select {
			case o := <-l.ops:
				batch = append(batch, o)
			default:
				break more
			}
		}
		args = args[:0]
		acquires := false
		for _, o := range batch {
			kind := "r"
			if o.acquire {
				kind, acquires = "a", true
			}
			args = append(args, kind, l.prefix+o.resource, o.owner, o.ttl)
		}
		var script *redis.Cmd
		var wait *redis.Cmd
		_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			script = p.EvalSha(ctx, l.sha, nil, args...)
			if acquires && l.minReplicas > 0 {
				wait = p.Do(ctx, "WAIT", l.minReplicas, 1000)
			}
			return nil
		})
		results, _ := script.Int64Slice()
		if err == nil && len(results) != len(batch) {
			err = fmt.Errorf("%d results for %d operations", len(results), len(batch))
		}
		if err == nil && wait != nil && acks(wait) < int64(l.minReplicas) {
			err = fmt.Errorf("%d of %d replicas", acks(wait), l.minReplicas)
		}
		if err == nil {
			err = l.record(batch, results)
		}
		for i, o := range batch {
			n := int64(-1) // the round failed
			if err == nil {
				n = results[i]
			}
			o.reply <- n
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "leanlock:", err)
		}
	}
}

// record gives each grant of the round its token, as results[i], and
// syncs the tokens and the counter in one batch.
func (l *lean) record(batch []*op, results []int64) error {
	b := l.db.NewBatch()
	defer b.Close()
	for i, o := range batch {
		if !o.acquire || results[i] == 0 {
			continue
		}
		l.last++
		results[i] = int64(l.last)
		if err := b.Set(tokenstate.TokenKey(o.resource), tokenstate.EncodeToken(l.last), nil); err != nil {
			return err
		}
	}
	if b.Empty() {
		return nil // releases only: nothing to sync
	}
	if err := b.Set(tokenstate.BoundKey, tokenstate.EncodeToken(l.last), nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// acks is a WAIT's count, 0 if it failed.
func acks(wait *redis.Cmd) int64 {
	n, _ := wait.Int64()
	return n
}
