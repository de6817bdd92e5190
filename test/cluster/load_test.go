package cluster

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// allowedDuringDisruption are the error codes a client may get while a
// master fails over or slots migrate: Redis's own (-TRYAGAIN, -CLUSTERDOWN),
// the lock family's "no replica acknowledged" (-NOREPLICAS), and the proxy's
// own Redis-style errors. Anything else is a failure, and so is any error
// once the proxy has recovered (load.Settle).
var allowedDuringDisruption = []string{"-TRYAGAIN", "-CLUSTERDOWN", "-NOREPLICAS", "-ERR fenceproxy:"}

// loadConnTimeout bounds each request of the load: longer than any wait the
// proxy may impose while it finds a new master, short enough to end a hung
// test.
const loadConnTimeout = 15 * time.Second

// maxErrorsPerWorker bounds the allowed errors one worker may see: with a
// pause of errorBackoff after each, more means the proxy never recovered.
const (
	maxErrorsPerWorker = 2000
	errorBackoff       = 20 * time.Millisecond
	opPause            = 2 * time.Millisecond
)

// loadOptions configure startLoad.
type loadOptions struct {
	addr string
	// lockWorkers acquire a random resource of resources with a unique
	// owner and a 10s lease, then release it.
	lockWorkers int
	resources   []string
	// kvWorkers SET and GET keys; worker w owns keys[i] with i%kvWorkers == w.
	kvWorkers int
	keys      []string
	// strict: a GET must return the last acknowledged SET (or one whose
	// outcome is unknown). Otherwise (a master is killed, and Redis
	// replication is asynchronous) any value the worker wrote, or null.
	strict bool
}

// load is clients hammering the proxy on their own connections, each reply
// checked as it arrives. Start it with startLoad, end it with Stop.
type load struct {
	opts loadOptions
	stop chan struct{}
	wg   sync.WaitGroup

	book    tokenBook
	ok      atomic.Int64 // successful replies (nulls included)
	settled atomic.Int64 // UnixNano of Settle, 0 before

	mu        sync.Mutex
	failures  []string
	allowed   map[string]int // error code -> count
	errs      []int          // per worker: error replies
	okSettled []int          // per worker: successes of requests sent after Settle
	dead      []bool         // per worker: its connection failed
	kv        map[string]*kvState
}

// kvState is what a GET of a key may return.
type kvState struct {
	acked bool     // a SET was acknowledged
	want  string   // the last acknowledged value
	maybe []string // values whose SET failed after that (outcome unknown)
}

// tokenBook records the tokens granted per resource, to check that each
// grant is above every grant seen before it was requested.
type tokenBook struct {
	mu  sync.Mutex
	max map[string]int64
	n   int
}

func (b *tokenBook) floor(resource string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max[resource]
}

func (b *tokenBook) grant(resource string, tok int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.max == nil {
		b.max = map[string]int64{}
	}
	b.max[resource] = max(b.max[resource], tok)
	b.n++
}

// snapshot returns the highest token granted per resource.
func (b *tokenBook) snapshot() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int64, len(b.max))
	for r, t := range b.max {
		out[r] = t
	}
	return out
}

// startLoad dials one connection per worker (from the test goroutine) and
// starts the workers.
func startLoad(t *testing.T, opts loadOptions) *load {
	t.Helper()
	workers := opts.lockWorkers + opts.kvWorkers
	l := &load{
		opts:      opts,
		stop:      make(chan struct{}),
		allowed:   map[string]int{},
		okSettled: make([]int, workers),
		dead:      make([]bool, workers),
		errs:      make([]int, workers),
		kv:        map[string]*kvState{},
	}
	for _, k := range opts.keys {
		l.kv[k] = &kvState{}
	}
	conns := make([]*testenv.Conn, workers)
	for i := range conns {
		conns[i] = testenv.Dial(t, opts.addr)
		conns[i].SetTimeout(loadConnTimeout)
	}
	for w := range opts.lockWorkers {
		l.wg.Add(1)
		go l.lockWorker(w, conns[w])
	}
	for w := range opts.kvWorkers {
		var mine []string
		for i := w; i < len(opts.keys); i += opts.kvWorkers {
			mine = append(mine, opts.keys[i])
		}
		l.wg.Add(1)
		go l.kvWorker(opts.lockWorkers+w, conns[opts.lockWorkers+w], mine)
	}
	return l
}

// Settle marks the proxy as recovered: from now on every request must
// succeed.
func (l *load) Settle() { l.settled.Store(time.Now().UnixNano()) }

// Stop ends the workers and waits for them (each at most one request
// timeout).
func (l *load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// waitOK waits until n more requests have succeeded, at most d.
func (l *load) waitOK(t *testing.T, n int64, d time.Duration) {
	t.Helper()
	base := l.ok.Load()
	deadline := time.Now().Add(d)
	for l.ok.Load() < base+n {
		if time.Now().After(deadline) {
			l.Stop()
			t.Fatalf("load: %d requests succeeded within %v, want %d; failures so far:\n%s",
				l.ok.Load()-base, d, n, lines(l.failureList(20)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEveryWorker waits until every worker whose connection is alive has
// had n requests succeed since Settle, at most d: the proxy serves every
// connection it had before the disruption.
func (l *load) waitEveryWorker(t *testing.T, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var behind []string
		l.mu.Lock()
		for w, ok := range l.okSettled {
			if ok < n && !l.dead[w] {
				behind = append(behind, fmt.Sprintf("worker %d: %d", w, ok))
			}
		}
		l.mu.Unlock()
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			l.Stop()
			t.Fatalf("load: within %v of the proxy's recovery, these connections had fewer than %d successful requests: %s; failures so far:\n%s",
				d, n, strings.Join(behind, ", "), lines(l.failureList(20)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// sleep pauses for d or until Stop.
func (l *load) sleep(d time.Duration) {
	select {
	case <-l.stop:
	case <-time.After(d):
	}
}

func (l *load) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, fmt.Sprintf(format, args...))
}

func (l *load) failureList(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) > n {
		return append(append([]string(nil), l.failures[:n]...), fmt.Sprintf("… and %d more", len(l.failures)-n))
	}
	return append([]string(nil), l.failures...)
}

// outcome of one request.
type outcome int

const (
	replied outcome = iota // a non-error reply
	errored                // an error reply (recorded)
	dead                   // the connection failed (recorded); the worker ends
)

// do sends one request on c and checks the reply: no redirection, and an
// error only if it is allowed and the request was sent before Settle.
func (l *load) do(worker int, c *testenv.Conn, args ...string) ([]byte, outcome) {
	sent := time.Now().UnixNano()
	reply, err := c.TryDo(args...)
	settled := l.settled.Load()
	after := settled != 0 && sent > settled
	if err != nil {
		l.fail("worker %d: %s: connection failed: %v (the proxy must keep serving its clients' connections)", worker, testenv.ShowCommand(args), err)
		l.mu.Lock()
		l.dead[worker] = true
		l.mu.Unlock()
		return reply, dead
	}
	if redirect(reply) {
		l.fail("worker %d: %s: redirection reached the client: %s", worker, testenv.ShowCommand(args), testenv.ShowReply(reply))
		return reply, errored
	}
	if len(reply) > 0 && reply[0] == '-' {
		code := ""
		for _, p := range allowedDuringDisruption {
			if strings.HasPrefix(string(reply), p) {
				code = p
			}
		}
		switch {
		case code == "":
			l.fail("worker %d: %s: %s is not an error a client may get from a cluster that is failing over", worker, testenv.ShowCommand(args), testenv.ShowReply(reply))
		case after:
			l.fail("worker %d: %s: %s after the proxy had recovered", worker, testenv.ShowCommand(args), testenv.ShowReply(reply))
		}
		l.mu.Lock()
		if code == "" {
			code, _, _ = strings.Cut(string(reply), " ")
			code = strings.TrimSuffix(code, "\r\n") + " (not allowed)"
		}
		l.allowed[code]++
		l.errs[worker]++
		n := l.errs[worker]
		l.mu.Unlock()
		if n == maxErrorsPerWorker {
			l.fail("worker %d: %d error replies: the proxy is not recovering (last: %s: %s)", worker, n, testenv.ShowCommand(args), testenv.ShowReply(reply))
		}
		return reply, errored
	}
	l.ok.Add(1)
	if after {
		l.mu.Lock()
		l.okSettled[worker]++
		l.mu.Unlock()
	}
	return reply, replied
}

func (l *load) lockWorker(w int, c *testenv.Conn) {
	defer l.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(w), 0x10c4))
	for seq := 0; !l.stopped(); seq++ {
		res := l.opts.resources[rng.IntN(len(l.opts.resources))]
		owner := fmt.Sprintf("w%d-%d", w, seq) // unique: a grant is never a same-owner retry
		floor := l.book.floor(res)
		reply, out := l.do(w, c, "LOCK.ACQUIRE", res, owner, "10000")
		switch {
		case out == dead:
			return
		case out == errored:
			l.sleep(errorBackoff)
			continue
		case testenv.IsNull(reply):
			l.sleep(opPause)
			continue
		}
		tok, ok := testenv.ParseInt(reply)
		if !ok || tok <= 0 {
			l.fail("worker %d: LOCK.ACQUIRE %s %s: %s, want a token or null", w, res, owner, testenv.ShowReply(reply))
			continue
		}
		if tok <= floor {
			l.fail("worker %d: LOCK.ACQUIRE %s %s: token %d, but %d was granted before this request was sent (tokens regressed)", w, res, owner, tok, floor)
		}
		l.book.grant(res, tok)

		// Release, retrying over allowed errors; a retry after an error may
		// find the release already done (:0).
		erred := false
		for attempt := 0; attempt < 200; attempt++ {
			reply, out = l.do(w, c, "LOCK.RELEASE", res, owner)
			if out == dead {
				return
			}
			if out == errored {
				erred = true
				if l.stopped() {
					break
				}
				l.sleep(errorBackoff)
				continue
			}
			if string(reply) != ":1\r\n" && (!erred || string(reply) != ":0\r\n") {
				l.fail("worker %d: LOCK.RELEASE %s %s right after its grant (token %d): %s, want :1 (the acknowledged grant was lost)", w, res, owner, tok, testenv.ShowReply(reply))
			}
			break
		}
		l.sleep(opPause)
	}
}

func (l *load) kvWorker(w int, c *testenv.Conn, keys []string) {
	defer l.wg.Done()
	if len(keys) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(uint64(w), 0x4b56))
	for seq := 0; !l.stopped(); seq++ {
		key := keys[rng.IntN(len(keys))]
		st := l.kvOf(key)
		if rng.IntN(2) == 0 {
			v := fmt.Sprintf("%s=%d", key, seq)
			reply, out := l.do(w, c, "SET", key, v)
			switch {
			case out == dead:
				return
			case out == errored:
				l.mu.Lock()
				st.maybe = append(st.maybe, v)
				l.mu.Unlock()
				l.sleep(errorBackoff)
				continue
			case string(reply) != "+OK\r\n":
				l.fail("worker %d: SET %s: %s, want +OK", w, key, testenv.ShowReply(reply))
			}
			l.mu.Lock()
			st.acked, st.want, st.maybe = true, v, nil
			l.mu.Unlock()
		} else {
			reply, out := l.do(w, c, "GET", key)
			switch out {
			case dead:
				return
			case errored:
				l.sleep(errorBackoff)
				continue
			}
			if err := l.checkValue(key, reply); err != nil {
				l.fail("worker %d: GET %s: %v", w, key, err)
			}
		}
		l.sleep(opPause)
	}
}

func (l *load) kvOf(key string) *kvState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kv[key]
}

// checkValue says whether reply is a value GET key may return now.
func (l *load) checkValue(key string, reply []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.kv[key]
	var got string
	isNull := testenv.IsNull(reply)
	if !isNull {
		b, ok := testenv.ParseBulk(reply)
		if !ok {
			return fmt.Errorf("reply %s is neither a bulk string nor null", testenv.ShowReply(reply))
		}
		got = string(b)
	}
	if !l.opts.strict {
		if isNull || strings.HasPrefix(got, key+"=") {
			return nil
		}
		return fmt.Errorf("%s: a value this key was never given", testenv.ShowReply(reply))
	}
	if isNull && !st.acked {
		return nil
	}
	if !isNull && st.acked && got == st.want {
		return nil
	}
	for _, m := range st.maybe {
		if !isNull && got == m {
			return nil
		}
	}
	if !st.acked {
		return fmt.Errorf("%s, want null or one of %q", testenv.ShowReply(reply), st.maybe)
	}
	return fmt.Errorf("%s, want the last acknowledged value %q (or one of %q, written with an unknown outcome)", testenv.ShowReply(reply), st.want, st.maybe)
}

// check fails the test with what the workers saw: failures, too few
// successes after Settle on any connection. It logs the error counts.
func (l *load) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	var codes []string
	for code, n := range l.allowed {
		codes = append(codes, fmt.Sprintf("%s×%d", code, n))
	}
	sort.Strings(codes)
	t.Logf("load: %d successful replies, %d grants; error replies during the disruption: %v", l.ok.Load(), l.book.n, codes)
	if l.settled.Load() != 0 {
		for w, n := range l.okSettled {
			if n == 0 && len(l.failures) == 0 {
				l.failures = append(l.failures, fmt.Sprintf("worker %d: no request succeeded on its connection after the proxy recovered", w))
			}
		}
	}
	l.mu.Unlock()
	if f := l.failureList(30); len(f) > 0 {
		t.Errorf("load: %d failures:\n%s", len(l.failures), lines(f))
	}
}

// checkFinal reads every key of the kv workers through c and checks it
// against what was acknowledged; and every resource's LOCK.INFO token
// against the highest token granted.
func (l *load) checkFinal(t *testing.T, c *testenv.Conn) {
	t.Helper()
	bad := 0
	for _, k := range l.opts.keys {
		reply := c.Do("GET", k)
		noRedirect(t, "GET "+k, reply)
		if err := l.checkValue(k, reply); err != nil {
			if bad++; bad <= 10 {
				t.Errorf("GET %s after the load: %v", k, err)
			}
		}
	}
	for r, top := range l.book.snapshot() {
		if li := info(t, c, r); li.Token < top {
			t.Errorf("LOCK.INFO %q: token %d, but %d was granted (%s)", r, li.Token, top, li.Raw)
		}
	}
}
