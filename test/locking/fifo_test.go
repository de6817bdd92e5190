// Package locking tests the lock manager's behaviour under contention through
// the real binary: first-come-first-served waiting and no barging.
package locking

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func waiters(t *testing.T, c *testenv.Conn, resource string) int {
	t.Helper()
	li, err := testenv.ParseLockInfo(c.Do("LOCK.INFO", resource))
	if err != nil {
		t.Fatalf("LOCK.INFO %s: %v", resource, err)
	}
	return int(li.Waiters)
}

// TestWaitersServedInArrivalOrder: five clients queue behind a holder one
// after another; each release grants the next in line, in arrival order.
func TestWaitersServedInArrivalOrder(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 2 * time.Second})
	admin := testenv.Dial(t, p.Addr)
	if r := admin.Do("LOCK.ACQUIRE", "fifo", "holder", "30000"); r[0] != ':' {
		t.Fatalf("holder's acquire = %q", r)
	}

	const n = 5
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	conns := make([]*testenv.Conn, n)
	for i := range conns {
		conns[i] = testenv.Dial(t, p.Addr)
		conns[i].SetTimeout(20 * time.Second)
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			owner := "waiter-" + strconv.Itoa(i)
			r, err := conns[i].TryDo("LOCK.ACQUIRE", "fifo", owner, "30000", "WAIT", "15000")
			if err != nil || r[0] != ':' {
				t.Errorf("%s: LOCK.ACQUIRE WAIT = %q, %v", owner, r, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if r, err := conns[i].TryDo("LOCK.RELEASE", "fifo", owner); err != nil || string(r) != ":1\r\n" {
				t.Errorf("%s: LOCK.RELEASE = %q, %v", owner, r, err)
			}
		}(i)
		// Wait until this one is in line before the next arrives.
		deadline := time.Now().Add(5 * time.Second)
		for waiters(t, admin, "fifo") != i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never showed in LOCK.INFO waiters", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// A client that does not wait may not jump the line, even when the
	// resource is momentarily free.
	if r := admin.Do("LOCK.RELEASE", "fifo", "holder"); string(r) != ":1\r\n" {
		t.Fatalf("holder's release = %q", r)
	}
	if r := admin.Do("LOCK.ACQUIRE", "fifo", "barger", "30000"); !testenv.IsNull(r) {
		t.Errorf("an acquire without WAIT took the lock past %d waiters: %q", n, r)
	}
	wg.Wait()
	if got, want := fmtInts(order), fmtInts([]int{0, 1, 2, 3, 4}); got != want {
		t.Fatalf("grant order %s, want arrival order %s", got, want)
	}
	if w := waiters(t, admin, "fifo"); w != 0 {
		t.Fatalf("LOCK.INFO waiters = %d after everyone was served", w)
	}
}

// TestWaitTimesOutWithNull: a waiter whose timeout passes gets null and
// leaves the line, so the next waiter is not stuck behind it.
func TestWaitTimesOutWithNull(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	c.Do("LOCK.ACQUIRE", "t", "holder", "30000")
	start := time.Now()
	if r := c.Do("LOCK.ACQUIRE", "t", "w", "1000", "WAIT", "200"); !testenv.IsNull(r) {
		t.Fatalf("LOCK.ACQUIRE WAIT 200 on a held lock = %q, want null", r)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("the wait returned after %v, before its 200ms timeout", d)
	}
	if w := waiters(t, c, "t"); w != 0 {
		t.Fatalf("waiters = %d after the only waiter timed out", w)
	}
	c.Do("LOCK.RELEASE", "t", "holder")
	if r := c.Do("LOCK.ACQUIRE", "t", "next", "1000"); r[0] != ':' {
		t.Fatalf("acquire after the timed-out waiter left = %q", r)
	}
}

// TestWaiterTakesExpiredLease: the head of the line gets the lock when the
// holder's lease runs out, without any release.
func TestWaiterTakesExpiredLease(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	first := c.Do("LOCK.ACQUIRE", "e", "holder", "300")
	r := c.Do("LOCK.ACQUIRE", "e", "w", "1000", "WAIT", "3000")
	a, ok1 := testenv.ParseInt(first)
	b, ok2 := testenv.ParseInt(r)
	if !ok1 || !ok2 || b <= a {
		t.Fatalf("holder got %q, waiter got %q: want the waiter to get a bigger token once the lease ran out", first, r)
	}
}

func fmtInts(xs []int) string {
	var b strings.Builder
	for _, x := range xs {
		b.WriteString(strconv.Itoa(x))
		b.WriteByte(' ')
	}
	return b.String()
}

// TestLockTop: LOCK.TOP lists the most contended resources, most first,
// with the acquires waiting on each now.
func TestLockTop(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	c.Do("LOCK.ACQUIRE", "hot", "holder", "30000")
	c.Do("LOCK.ACQUIRE", "warm", "holder", "30000")
	for i := 0; i < 5; i++ {
		c.Do("LOCK.ACQUIRE", "hot", "other", "1000")
	}
	c.Do("LOCK.ACQUIRE", "warm", "other", "1000")
	want := "*2\r\n*3\r\n$3\r\nhot\r\n:5\r\n:0\r\n*3\r\n$4\r\nwarm\r\n:1\r\n:0\r\n"
	if got := c.Do("LOCK.TOP"); string(got) != want {
		t.Fatalf("LOCK.TOP = %q, want %q", got, want)
	}
	if got := c.Do("LOCK.TOP", "1"); !strings.HasPrefix(string(got), "*1\r\n*3\r\n$3\r\nhot\r\n") {
		t.Fatalf("LOCK.TOP 1 = %q", got)
	}
	if got := c.Do("LOCK.TOP", "0"); !strings.HasPrefix(string(got), "-ERR") {
		t.Fatalf("LOCK.TOP 0 = %q, want an error", got)
	}
}
