package upstream

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// pushLog is a tracking client's pushes, as Track's onPush gets them.
type pushLog struct {
	mu     sync.Mutex
	frames []string
}

func (l *pushLog) push(frame []byte) {
	l.mu.Lock()
	l.frames = append(l.frames, string(frame))
	l.mu.Unlock()
}

func (l *pushLog) has(frame string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.frames {
		if f == frame {
			return true
		}
	}
	return false
}

const nullInvalidation = ">2\r\n$10\r\ninvalidate\r\n_\r\n"

// TestTrackerDropsFormerMaster: when the topology read says a node is no
// longer a master (a manual failover handed its slots to its replica), a
// tracking client's connection to it is gone and its null invalidation
// pushed by the time refresh publishes the new view, before any request
// of the client can reach the promoted master. The other masters'
// connections stay. Mutation: without Trackers.Follow in refresh, no null
// invalidation when refresh returned (it came only when the retired node
// closed, retireAfter later).
func TestTrackerDropsFormerMaster(t *testing.T) {
	tc := testenv.StartCluster(t, testenv.ClusterOptions{Masters: 3, ReplicasPerMaster: 1})
	c := connect(t, strings.Split(tc.Seeds(), ",")...).(*Cluster)
	var log pushLog
	cl := &Client{ID: 1, RESP3: true}
	if _, err := c.Track(cl, log.push, nil); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, c, cl, "CLIENT", "TRACKING", "ON"); got != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON: %q", got)
	}
	masters := c.Masters()
	for i := range masters {
		k := ""
		for j := 0; k == ""; j++ {
			if cand := "tk:" + strconv.Itoa(j); c.MasterForKey([]byte(cand)) == masters[i] {
				k = cand
			}
		}
		if got := roundTrip(t, c, cl, "GET", k); got != "_\r\n" {
			t.Fatalf("GET %s: %q", k, got)
		}
	}
	open := len(cl.track.Connected())
	if open != len(masters) {
		t.Fatalf("the tracker has %d connections after reads on %d masters", open, len(masters))
	}

	victim := masters[1]
	var replica *testenv.Redis
	for _, m := range tc.Masters {
		if m.Addr == victim.Addr {
			replica = tc.ReplicasOf(m)[0]
		}
	}
	tc.Failover(t, replica)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if !log.has(nullInvalidation) {
		t.Fatalf("refresh returned with %s no longer a master, and the tracking client has no null invalidation (pushes %q)", victim.Addr, log.frames)
	}
	connected := cl.track.Connected()
	kept := slices.Contains(connected, victim)
	open = len(connected)
	if kept || open != len(masters)-1 {
		t.Fatalf("after the failover the tracker has %d connections (one to %s: %v)", open, victim.Addr, kept)
	}
	cl.Untrack()
}
