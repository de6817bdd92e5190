package locks

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// The two fakes below stand at the Manager's seams (ScriptRunner,
// TokenStore) so that every outcome of a lock command can be set up
// without a redis-server; the real parts are tested behind the same seams
// (internal/lockwriter, opsscript_test.go, TestTokenStoreContract) and end to end in test/.

// sent is one script call as the fake runner saw it.
type sent struct {
	script   string // acquire, renew, release, undo, exec, info or other
	key      string
	keys     []string
	args     []string // as they go on the wire
	wantAcks bool
}

// reply is what the fake runner answers one call with: raw RESP for the
// script's reply (or err, as a Write that was not sent or was lost says),
// and for a write that wants acknowledgements WAIT's raw reply.
type reply struct {
	raw  string
	err  error
	acks string
}

// fakeScripts is a ScriptRunner whose replies a test scripts, in order or
// by a function of the call, and that records every call.
type fakeScripts struct {
	t        testing.TB
	mu       sync.Mutex
	calls    []sent
	replies  []reply // Start's, taken in order
	undos    []reply // RunAfter's, taken in order
	respond  func(c sent) reply
	cluster  bool // RoutesByKey
	read     func(key string) (any, error)
	policy   upstream.MemoryPolicy
	noMaster bool
}

func newFakeScripts(t testing.TB, replies ...reply) *fakeScripts {
	return &fakeScripts{t: t, replies: replies, policy: upstream.MemoryPolicy{Policy: upstream.NoEviction}}
}

func scriptName(c lockwriter.ScriptCall) string {
	switch c.Op {
	case opAcquire:
		return "acquire"
	case opRenew:
		return "renew"
	case opRelease:
		return "release"
	case opUndo:
		return "undo"
	case opHandoff:
		return "handoff"
	case opHashAcquire:
		return "hash-acquire"
	case opHashAcquireUndo:
		return "hash-undo"
	case opHashRenew:
		return "hash-renew"
	case opHashRenewUndo:
		return "hash-renew-undo"
	case opHashUnlock, opHashForceUnlock:
		return "hash-unlock"
	}
	switch c.Source {
	case execScript:
		return "exec"
	case infoScript:
		return "info"
	}
	return "other"
}

// argStrings reads a call's arguments back as the strings Redis gets.
func argStrings(a lockwriter.ScriptArgs) []string {
	var out []string
	rest := a.Encoded()
	for len(rest) > 0 {
		head, body, _ := bytes.Cut(rest, []byte("\r\n"))
		n, err := strconv.Atoi(string(head[1:]))
		if head[0] != '$' || err != nil || len(body) < n+2 {
			panic(fmt.Sprintf("malformed script arguments %q", a.Encoded()))
		}
		out, rest = append(out, string(body[:n])), body[n+2:]
	}
	if len(out) != a.Len() {
		panic(fmt.Sprintf("script arguments %q: %d, counted %d", a.Encoded(), len(out), a.Len()))
	}
	return out
}

func (f *fakeScripts) record(key string, c lockwriter.ScriptCall, wantAcks bool) sent {
	s := sent{script: scriptName(c), key: key, keys: c.Keys, wantAcks: wantAcks}
	s.args = argStrings(c.Args)
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
	return s
}

// next takes the reply to c from the list (or respond).
func (f *fakeScripts) next(list *[]reply, c sent) reply {
	f.mu.Lock()
	respond := f.respond
	var r reply
	ok := len(*list) > 0
	if ok {
		r, *list = (*list)[0], (*list)[1:]
	}
	f.mu.Unlock()
	if respond != nil && !ok {
		return respond(c)
	}
	if !ok {
		f.t.Errorf("unexpected %s call: %+v", c.script, c)
		return reply{err: upstream.ErrUnavailable}
	}
	return r
}

// write makes the Write a reply stands for: one already answered.
func (r reply) write() *lockwriter.Write {
	if r.err != nil {
		return lockwriter.Unsent(r.err)
	}
	var acks []byte
	if r.acks != "" {
		acks = []byte(r.acks)
	}
	return lockwriter.Replied([]byte(r.raw), acks)
}

func (f *fakeScripts) Start(ctx context.Context, key string, call lockwriter.ScriptCall, wantAcks bool) *lockwriter.Write {
	c := f.record(key, call, wantAcks)
	if f.noMaster {
		return lockwriter.Unsent(upstream.ErrUnavailable)
	}
	return f.next(&f.replies, c).write()
}

func (f *fakeScripts) RunAfter(ctx context.Context, prev *lockwriter.Write, call lockwriter.ScriptCall) (any, error) {
	c := f.record("", call, false)
	return f.next(&f.undos, c).write().Reply()
}

func (f *fakeScripts) Read(ctx context.Context, key string, call lockwriter.ScriptCall) (any, error) {
	f.record(key, call, false)
	f.mu.Lock()
	read := f.read
	f.mu.Unlock()
	if read == nil {
		return []any{nil, nil, int64(-2), nil, nil, nil}, nil // free
	}
	return read(key)
}

func (f *fakeScripts) RoutesByKey() bool { return f.cluster }

func (f *fakeScripts) MemoryPolicy(key string) (upstream.MemoryPolicy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.policy, !f.noMaster
}

// sent returns the calls so far.
func (f *fakeScripts) sent() []sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sent(nil), f.calls...)
}

// names returns the calls so far as "script" or "script+acks".
func (f *fakeScripts) names() []string {
	var names []string
	for _, c := range f.sent() {
		n := c.script
		if c.wantAcks {
			n += "+acks"
		}
		names = append(names, n)
	}
	return names
}

// kindReply is acquireScript's {kind, value}: busy's lease and
// kindNeedNewest's 0 are integers, tokens strings.
func kindReply(k replyKind, value string) string {
	if k == kindGranted {
		return bulk(value) // a grant is its token alone, as opsScript replies
	}
	if k == kindBusy || k == kindNeedNewest {
		return fmt.Sprintf("*2\r\n:%d\r\n:%s\r\n", k, value)
	}
	return fmt.Sprintf("*2\r\n:%d\r\n", k) + bulk(value)
}

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

func acked(n int) string { return fmt.Sprintf(":%d\r\n", n) }

// memTokens is a TokenStore in memory, with failures a test can set. Its
// "disk" is what reopen keeps: every confirmed token, every reservation
// not cancelled (folded in), the floor and the counter's bound.
type memTokens struct {
	mu       sync.Mutex
	last     uint64
	floor    uint64
	newest   map[string]uint64
	known    map[string]bool // what NewestCached knows without "I/O"
	reserved map[string]map[uint64]bool
	log      []string // reserve, confirm, cancel and adopt calls that succeeded

	failNext, failNewest, failCached, failReserve, failConfirm, failCancel, failAdopt error
}

func newMemTokens() *memTokens {
	return &memTokens{newest: map[string]uint64{}, known: map[string]bool{}, reserved: map[string]map[uint64]bool{}}
}

func (s *memTokens) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *memTokens) NextToken() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNext != nil {
		return 0, s.failNext
	}
	s.last = max(s.last, s.floor) + 1
	return s.last, nil
}

func (s *memTokens) Floor() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.floor
}

func (s *memTokens) Adopt(token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAdopt != nil {
		return s.failAdopt
	}
	if token >= s.floor {
		s.floor = token + 1
	}
	s.logf("adopt %d", token)
	return nil
}

func (s *memTokens) Newest(resource string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNewest != nil {
		return 0, s.failNewest
	}
	s.known[resource] = true
	return max(s.newest[resource], s.floor), nil
}

func (s *memTokens) NewestCached(resource string) (uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failCached != nil {
		return 0, false, s.failCached
	}
	return max(s.newest[resource], s.floor), s.known[resource], nil
}

func (s *memTokens) Reserve(resource string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failReserve != nil {
		return s.failReserve
	}
	if token == 0 || token > s.last {
		return persist.ErrBadToken
	}
	if s.reserved[resource] == nil {
		s.reserved[resource] = map[uint64]bool{}
	}
	s.reserved[resource][token] = true
	s.logf("reserve %s %d", resource, token)
	return nil
}

// ReserveAll makes memTokens a store that reserves ahead for waiting
// lines, as the fence store does (one sync for all in the real one).
func (s *memTokens) ReserveAll(resource string, tokens []uint64) error {
	for _, t := range tokens {
		if err := s.Reserve(resource, t); err != nil {
			return err
		}
	}
	return nil
}

func (s *memTokens) Confirm(resource string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failConfirm != nil {
		return s.failConfirm
	}
	if token == 0 || token > s.last {
		return persist.ErrBadToken
	}
	delete(s.reserved[resource], token)
	s.newest[resource] = token
	s.known[resource] = true
	s.logf("confirm %s %d", resource, token)
	return nil
}

func (s *memTokens) Cancel(resource string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failCancel != nil {
		return s.failCancel
	}
	delete(s.reserved[resource], token)
	s.logf("cancel %s %d", resource, token)
	return nil
}

// reopen is the store after a crash: reservations count as issued.
func (s *memTokens) reopen() *memTokens {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := newMemTokens()
	n.last, n.floor = s.last, s.floor
	for r, t := range s.newest {
		n.newest[r] = t
	}
	for r, ts := range s.reserved {
		for t := range ts {
			n.newest[r] = max(n.newest[r], t)
		}
	}
	return n
}

// TestTokenStoreContract runs the TokenStore contract's checks on the
// fence store and on the fake the Manager's table tests use, so that the
// fake keeps the contract the real store keeps.
func TestTokenStoreContract(t *testing.T) {
	t.Run("persist", func(t *testing.T) {
		dir := t.TempDir()
		var open *persist.Store
		reopen := func() TokenStore {
			if open != nil {
				open.Close()
			}
			s, err := persist.Open(dir, persist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			open = s
			return PersistStore(s)
		}
		t.Cleanup(func() { open.Close() })
		checkTokenStore(t, reopen)
	})
	t.Run("memory", func(t *testing.T) {
		var s *memTokens
		checkTokenStore(t, func() TokenStore {
			if s == nil {
				s = newMemTokens()
			} else {
				s = s.reopen()
			}
			return s
		})
	})
}

// checkTokenStore checks the contract on the store reopen gives: the same
// store after a crash each time it is called (the first call opens it).
func checkTokenStore(t *testing.T, reopen func() TokenStore) {
	s := reopen()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	newest := func(r string) uint64 {
		t.Helper()
		n, err := s.Newest(r)
		must(err)
		return n
	}
	next := func() uint64 {
		t.Helper()
		n, err := s.NextToken()
		must(err)
		return n
	}
	if n := newest("r"); n != 0 {
		t.Fatalf("Newest of a new resource = %d, want 0", n)
	}
	a, b := next(), next()
	if b <= a || a == 0 {
		t.Fatalf("NextToken gave %d then %d: not rising", a, b)
	}
	must(s.Reserve("r", a))
	if n := newest("r"); n != 0 {
		t.Fatalf("Newest after Reserve = %d: a reservation counted while the process lives", n)
	}
	must(s.Confirm("r", a))
	if n, ok, err := s.NewestCached("r"); err != nil || !ok || n != a {
		t.Fatalf("NewestCached after Confirm = %d, %v, %v; want %d, known", n, ok, err, a)
	}
	must(s.Reserve("r", b))
	must(s.Cancel("r", b))
	if n := newest("r"); n != a {
		t.Fatalf("Newest after a cancelled reservation = %d, want %d", n, a)
	}
	c := next()
	must(s.Reserve("crashed", c)) // neither confirmed nor cancelled
	if err := s.Reserve("r", c+1000); err == nil {
		t.Fatalf("Reserve of a token never returned by NextToken succeeded")
	}

	s = reopen()
	if n := newest("r"); n != a {
		t.Fatalf("Newest after a crash = %d, want %d (the cancelled %d must not count)", n, a, b)
	}
	if n := newest("crashed"); n != c {
		t.Fatalf("Newest of a reservation left by a crash = %d, want %d", n, c)
	}
	if d := next(); d <= c {
		t.Fatalf("NextToken after a crash = %d, not above %d", d, c)
	}

	floor := next() + 500
	must(s.Adopt(floor))
	if f := s.Floor(); f <= floor {
		t.Fatalf("Floor after Adopt(%d) = %d, want above it", floor, f)
	}
	if n := newest("r"); n != s.Floor() {
		t.Fatalf("Newest below the floor = %d, want the floor %d", n, s.Floor())
	}
	if d := next(); d <= s.Floor() {
		t.Fatalf("NextToken after Adopt = %d, not above the floor %d", d, s.Floor())
	}
	f := s.Floor()
	must(s.Adopt(1))
	if s.Floor() != f {
		t.Fatalf("the floor fell: %d after %d", s.Floor(), f)
	}
	s = reopen()
	if s.Floor() != f {
		t.Fatalf("the floor after a crash = %d, want %d", s.Floor(), f)
	}
}
