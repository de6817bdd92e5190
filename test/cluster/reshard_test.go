package cluster

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// reshardWait bounds redis-cli --cluster reshard.
const reshardWait = 2 * time.Minute

// reshard moves n slots from one master to another with redis-cli, as an
// operator would, and fails the test with its output if it does not succeed.
func reshard(t *testing.T, seed, fromID, toID string, n int) {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found: apt-get install -y redis-tools")
	}
	ctx, cancel := context.WithTimeout(context.Background(), reshardWait)
	defer cancel()
	c := exec.CommandContext(ctx, cli, "--cluster", "reshard", seed,
		"--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes",
		// One key per MIGRATE: the slots stay half-moved longer, so more
		// requests meet -ASK and -TRYAGAIN.
		"--cluster-pipeline", "1")
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.WaitDelay = 5 * time.Second
	out, err := c.CombinedOutput()
	if err != nil {
		text := string(out)
		if len(text) > 3000 {
			text = "…" + text[len(text)-3000:]
		}
		t.Fatalf("redis-cli --cluster reshard (%v): %v\n%s", reshardWait, err, text)
	}
	if strings.Contains(string(out), "[ERR]") {
		t.Fatalf("redis-cli --cluster reshard reported an error:\n%s", out)
	}
}

// TestReshardUnderLoad moves 100 slots holding keys and lock records from
// one master to another (redis-cli --cluster reshard, key by key with
// MIGRATE, the slots IMPORTING and MIGRATING meanwhile) while clients write,
// read and lock in exactly those slots. No client sees MOVED or ASK, every
// value is readable afterwards, held locks stay held and tokens keep
// increasing for the resources that moved.
func TestReshardUnderLoad(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	src, dst := e.cl.Masters[0], e.cl.Masters[1]
	srcID, dstID := nodeID(t, src), nodeID(t, dst)

	// redis-cli takes the source's slots in ascending order.
	const nSlots = 100
	moving := map[int]bool{}
	for s := 0; s < testenv.ClusterSlots && len(moving) < nSlots; s++ {
		if st.owner[s] == src {
			moving[s] = true
		}
	}

	proxy := e.dial(t)
	proxy.SetTimeout(loadConnTimeout)
	next := 0
	var pre []string
	for range 2000 { // 20 a slot: MIGRATE takes a while
		k := keyInSlots("mig:", moving, &next)
		pre = append(pre, k)
		proxy.Send("SET", k, "pre-"+k)
	}
	proxy.Flush()
	for _, k := range pre {
		if got, err := proxy.ReadReply(); err != nil || string(got) != "+OK\r\n" {
			t.Fatalf("SET %s: %q, %v", k, got, err)
		}
	}
	var heldRes []string
	for i := 0; len(heldRes) < 20; i++ {
		if r := "mres:" + strconv.Itoa(i); moving[resourceSlot(r)] {
			heldRes = append(heldRes, r)
		}
	}
	hs := takeHeld(t, proxy, heldRes)

	var resources, keys []string
	for i := 0; len(resources) < 30; i++ {
		if r := "mlock:" + strconv.Itoa(i); moving[resourceSlot(r)] {
			resources = append(resources, r)
		}
	}
	next = 0
	for range 200 {
		keys = append(keys, keyInSlots("mkv:", moving, &next))
	}
	movingProbe := probe{c: proxy, key: keyInSlots("mprobe:", moving, &next)}
	for i := 0; movingProbe.resource == ""; i++ {
		if r := "mprobe:" + strconv.Itoa(i); moving[resourceSlot(r)] {
			movingProbe.resource = r
		}
	}
	probes := append(openProbes(t, e, st), movingProbe)

	l := startLoad(t, loadOptions{
		addr: e.proxy.Addr, lockWorkers: 20, resources: resources,
		kvWorkers: 10, keys: keys, strict: true,
	})
	defer l.Stop()
	l.waitOK(t, 300, 20*time.Second)

	before, start := l.ok.Load(), time.Now()
	reshard(t, src.Addr, srcID, dstID, nSlots)
	t.Logf("the reshard took %v; %d requests succeeded meanwhile", time.Since(start).Round(time.Millisecond), l.ok.Load()-before)
	e.cl.WaitHealthy(t)
	after := readSlots(t, e.cl)
	for s := range moving {
		if after.owner[s] != dst {
			t.Fatalf("after the reshard slot %d is on %s, want %s (redis-cli moved other slots than the test loads)", s, after.owner[s].Addr, dst.Addr)
		}
	}

	recoverProbes(t, probes)
	l.Settle()
	l.waitEveryWorker(t, 5, recoverWait)
	l.Stop()
	l.check(t)

	// Every value written before the move is where it now belongs, and
	// readable through the proxy.
	d := testenv.Dial(t, dst.Addr)
	bad := 0
	for _, k := range pre {
		want := "$" + strconv.Itoa(len("pre-"+k)) + "\r\npre-" + k + "\r\n"
		got := proxy.Do("GET", k)
		noRedirect(t, "GET "+k, got)
		direct := d.Do("GET", k)
		if string(got) != want || string(direct) != want {
			if bad++; bad <= 10 {
				t.Errorf("GET %s after the reshard: via proxy %s, on %s directly %s; want %q", k, testenv.ShowReply(got), dst.Addr, testenv.ShowReply(direct), want)
			}
		}
	}
	checkHeld(t, proxy, hs)
	l.checkFinal(t, proxy)

	// A new grant on every resource that moved is above every grant before.
	c := e.dial(t)
	c.SetTimeout(loadConnTimeout)
	for r, top := range l.book.snapshot() {
		tok := token(t, c, "LOCK.ACQUIRE", r, "after-reshard", "1000", "WAIT", "11000")
		if tok <= top {
			t.Errorf("LOCK.ACQUIRE %s after the reshard: token %d, but %d was granted before", r, tok, top)
		}
	}
}
