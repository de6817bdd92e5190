package locking

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestDelayedFenceExecAcrossRestart is issue 22's item 1 (b) on one node:
// holder X's FENCE.EXEC is checked by the proxy and sent, but its bytes are
// held on the way to Redis (a Link in front of the backend, cut); the
// proxy is killed (-9) and started again on the same data dir, straight
// to Redis; X's lock is released, Y is granted a newer token and writes
// with FENCE.EXEC; then the Link heals and X's held bytes reach Redis.
// They must not overwrite Y's write: the final value is Y's. (Before the
// fence mark, X's write ran: its check was made in the proxy alone.)
func TestDelayedFenceExecAcrossRestart(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	link := testenv.StartLink(t, master.Addr)
	p1 := testenv.StartProxy(t, testenv.ProxyOptions{Backend: link.Addr, MinReplicas: 0, ReplicaTimeout: 100 * time.Millisecond})
	m := testenv.Dial(t, master.Addr)
	const r, k = "acct:1", "acct:1:balance"

	x := testenv.Dial(t, p1.Addr)
	x.SetTimeout(30 * time.Second)
	tokX, ok := testenv.ParseInt(x.Do("LOCK.ACQUIRE", r, "X", "60000"))
	if !ok {
		t.Fatalf("X's LOCK.ACQUIRE failed")
	}
	if got := string(x.Do("FENCE.EXEC", r, strconv.FormatInt(tokX, 10), "SET", k, "x-first")); got != "+OK\r\n" {
		t.Fatalf("X's first fenced SET = %q", got)
	}

	// X's second write is checked and sent, and held in the Link. The
	// proxy's lock connection gives up on its reply (--replica-timeout
	// plus 2s) and answers that it may or may not have run: the write
	// was sent.
	landed := master.SeenInMonitor(t, "x-stale")
	link.Cut(t, testenv.Upstream)
	got := x.Do("FENCE.EXEC", r, strconv.FormatInt(tokX, 10), "SET", k, "x-stale")
	if !strings.Contains(string(got), "may or may not") {
		t.Fatalf("X's FENCE.EXEC with its bytes held = %q, want the may-or-may-not-have-run error", got)
	}
	p1.Kill9()

	// The proxy again, on the same data dir, straight to Redis.
	p2 := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, DataDir: p1.DataDir, MinReplicas: 0})
	c := testenv.Dial(t, p2.Addr)
	waitFor(t, 20*time.Second, "the restarted proxy serving lock commands", func() bool {
		return !strings.HasPrefix(string(c.Do("FENCE.CHECK", r, strconv.FormatInt(tokX, 10))), "-TRYAGAIN")
	})
	if n, _ := testenv.ParseInt(c.Do("LOCK.RELEASE", r, "X")); n != 1 {
		t.Fatalf("X's release through the restarted proxy did not release")
	}
	tokY, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", r, "Y", "60000"))
	if !ok || tokY <= tokX {
		t.Fatalf("Y's token %d after X's %d", tokY, tokX)
	}
	if got := string(c.Do("FENCE.EXEC", r, strconv.FormatInt(tokY, 10), "SET", k, "y")); got != "+OK\r\n" {
		t.Fatalf("Y's fenced SET = %q", got)
	}

	// X's held bytes arrive.
	link.Heal(t)
	select {
	case <-landed:
	case <-time.After(30 * time.Second):
		t.Fatalf("X's held FENCE.EXEC never reached Redis after the Link healed: the scenario did not happen")
	}
	if v, _ := testenv.ParseBulk(m.Do("GET", k)); string(v) != "y" {
		t.Fatalf("%s = %q after X's delayed write arrived, want Y's \"y\": a stale fenced write landed after a newer token's", k, v)
	}
	// The restarted proxy still calls Y current and X stale.
	if got := string(c.Do("FENCE.EXEC", r, strconv.FormatInt(tokX, 10), "SET", k, "x-again")); !strings.HasPrefix(got, "-STALE") {
		t.Errorf("X's FENCE.EXEC after the restart = %q, want -STALE", got)
	}
}
