package fault

import (
	"fmt"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// redisLinks are the Links in front of each Redis of the suite. Sentinel
// monitors the master at its Link and learns the replica at its Link
// (Redis.AnnounceVia), so the master it names, before and after any
// failover, is a Link address: the proxy reaches Redis only through them,
// and a redis-partition cuts the current master's.
type redisLinks map[*testenv.Redis]*testenv.Link

// linkRedis puts a Link in front of the master and the replica; before
// StartSentinels.
func (e *env) linkRedis() {
	e.links = redisLinks{}
	e.holds = map[*testenv.Redis]*holdRelay{}
	for _, r := range []*testenv.Redis{e.master, e.replica} {
		e.holds[r] = startHoldRelay(e.t, r.Addr)
		l := testenv.StartLink(e.t, e.holds[r].addr())
		r.AnnounceVia(e.t, l)
		e.links[r] = l
	}
}

// named is the address Sentinel names r by: its Link's.
func (e *env) named(r *testenv.Redis) string { return e.links[r].Addr }

// partitionPhase is one cut of a redis-partition.
type partitionPhase struct {
	dir  testenv.Direction
	drop bool // bytes discarded and the connections closed at heal, instead of held
	d    time.Duration
}

func (ph partitionPhase) String() string {
	how := "held"
	if ph.drop {
		how = "dropped, connections closed at heal"
	}
	return fmt.Sprintf("cut %s (bytes %s) for %v", ph.dir, how, ph.d)
}

// oneWayCuts are the second phase's choices.
var oneWayCuts = []partitionPhase{
	{dir: testenv.Upstream},               // requests wait: Redis runs nothing until heal
	{dir: testenv.Downstream},             // Redis runs the requests, the replies wait
	{dir: testenv.Downstream, drop: true}, // Redis runs the requests, the replies never come
	{dir: testenv.Upstream, drop: true},   // the requests never reach Redis
}

// phasesOf draws a redis-partition's two phases from the plan's choice:
// both ways, then one way, each 300ms to 1s, so that with the heal between
// them Sentinel (down-after 2.5s) never deems the master down.
func phasesOf(n int) []partitionPhase {
	one := oneWayCuts[n/64%len(oneWayCuts)]
	one.d = time.Duration(300+n/8%8*100) * time.Millisecond
	return []partitionPhase{{dir: testenv.BothWays, d: time.Duration(300+n%8*100) * time.Millisecond}, one}
}

// redisPartition runs both phases against the current master's Link,
// recording one Fault per phase from the moment the cut is in place to
// the moment before it heals.
func (e *env) redisPartition(p planned) {
	l := e.links[e.master]
	for i, ph := range phasesOf(p.N) {
		if i > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		if ph.drop {
			l.Drop(e.t, ph.dir)
		} else {
			l.Cut(e.t, ph.dir)
		}
		f := Fault{Kind: RedisPartition, At: p.At, Start: e.h.Now()}
		time.Sleep(ph.d)
		f.End = e.h.Now()
		l.Heal(e.t)
		f.Note = fmt.Sprintf("phase %d: proxy and Sentinels to master %s %s", i+1, e.master.Addr, ph)
		e.h.AddFault(f)
	}
	e.checkSentinelMaster()
}

// The redis-partition check must be able to fail: a grant, a fenced write
// and an ordinary GET answered inside a cut are each reported; a
// FENCE.CHECK answered from the fence store, a refusal, and a grant that
// started before the cut are not.
func TestCheckerAnsweredThroughPartition(t *testing.T) {
	b := newHist()
	b.fault(RedisPartition, 100, 500)
	b.acquire(1, "A", 1000, 200, 300, OK, 10)
	b.exec(1, 10, 310, 320, OK)
	b.add(2, Get, "", "", 0, 0, 330, 340, OK, 0)
	expect(t, b, "redis-partition")
	if n := len(CheckHistory(b.h).Violations); n != 3 {
		t.Errorf("%d violations, want 3 (acquire, exec, get)", n)
	}

	ok := newHist()
	ok.fault(RedisPartition, 100, 500)
	ok.acquire(1, "A", 1000, 90, 99, OK, 10) // before the cut
	ok.check(1, 10, 200, 210, OK)            // from the fence store
	ok.acquire(2, "B", 1000, 220, 230, Late, 0)
	ok.acquire(3, "C", 1000, 240, -1, Unknown, 0)
	expect(t, ok)
}
