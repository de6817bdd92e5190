package authority

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const interval = 50 * time.Millisecond

// setup is one Redis with a backend connection to it.
type setup struct {
	redis  *testenv.Redis
	be     upstream.Backend
	writer *lockwriter.Writer
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	be, err := upstream.Connect(ctx, upstream.Options{Seeds: []string{r.Addr}, PoolSize: 1, WriterConns: 1, ReplicaTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	return &setup{redis: r, be: be, writer: lockwriter.New(lockwriter.Options{Backend: be, ReplicaTimeout: 200 * time.Millisecond})}
}

func openStore(t *testing.T, dir string) *persist.Store {
	t.Helper()
	s, err := persist.Open(dir, persist.Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs an authority for store; t.Cleanup closes both.
func (su *setup) start(t *testing.T, store *persist.Store) *Authority {
	t.Helper()
	return su.startEvery(t, store, interval)
}

// startEvery is start with rounds every iv.
func (su *setup) startEvery(t *testing.T, store *persist.Store, iv time.Duration) *Authority {
	t.Helper()
	a := New(Options{Backend: su.be, Writer: su.writer, Store: store, ReplicaTimeout: 200 * time.Millisecond, Interval: iv})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); store.Close() })
	return a
}

// killed runs an authority on the store in dir and leaves it as kill -9
// would: its store closed, its member still live for a minute.
func (su *setup) killed(t *testing.T, dir string) *Authority {
	t.Helper()
	s := openStore(t, dir)
	a := New(Options{Backend: su.be, Writer: su.writer, Store: s, ReplicaTimeout: 200 * time.Millisecond, Interval: interval})
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.Close()
	su.keysConn(t).Do("ZADD", a.liveKey, liveUntil(time.Minute), a.member)
	s.Close()
	return a
}

// keysDB is where the authority keeps its keys on a Redis with the
// default 16 databases: the highest.
const keysDB = "15"

// keysConn is a connection to Redis in the authority's database.
func (su *setup) keysConn(t *testing.T) *testenv.Conn {
	t.Helper()
	c := testenv.Dial(t, su.redis.Addr)
	if r := c.Do("SELECT", keysDB); string(r) != "+OK\r\n" {
		t.Fatalf("SELECT %s = %s", keysDB, testenv.ShowReply(r))
	}
	return c
}

// liveUntil is a heartbeat score d from now.
func liveUntil(d time.Duration) string { return strconv.FormatInt(time.Now().Add(d).UnixMilli(), 10) }

// waitFor polls cond (a bound against hangs, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func conflict(a *Authority) *ConflictError {
	var c *ConflictError
	if errors.As(a.Admit(), &c) {
		return c
	}
	return nil
}

// TestConflictBetweenStores: two stores on one backend see each other and
// both refuse; once one leaves, the other admits again.
func TestConflictBetweenStores(t *testing.T) {
	su := newSetup(t)
	s1, s2 := openStore(t, t.TempDir()), openStore(t, t.TempDir())
	a1 := su.start(t, s1)
	if err := a1.Admit(); err != nil {
		t.Fatalf("a lone authority: Admit = %v", err)
	}
	a2 := su.start(t, s2)
	if c := conflict(a2); c == nil || c.Copy || len(c.Stores) != 1 || c.Stores[0] != s1.ID() {
		t.Fatalf("the second store right after Start: Admit = %v, want a conflict naming %s", a2.Admit(), s1.ID())
	}
	if _, err := s2.NextToken(); !errors.Is(err, persist.ErrNotShared) {
		t.Fatalf("the second store issued a token while in conflict: %v", err)
	}
	// It learnt the first store's bound at once (should Redis lose it, its
	// floor still holds it), and wrote nothing to Redis.
	if s2.Floor() <= s1.SyncedBound() || a2.Stats().RedisBound != s1.SyncedBound() {
		t.Fatalf("the second store's floor %d, Redis bound %d; want the floor above the first store's bound %d, Redis unchanged",
			s2.Floor(), a2.Stats().RedisBound, s1.SyncedBound())
	}
	waitFor(t, "a conflict seen by the first store", func() bool {
		c := conflict(a1)
		return c != nil && len(c.Stores) == 1 && c.Stores[0] == s2.ID()
	})
	if st := a1.Stats(); st.Confirmed || len(st.Others) != 1 {
		t.Fatalf("Stats during the conflict: %+v", st)
	}
	a2.Close()
	waitFor(t, "the first store admitting again", func() bool { return a1.Admit() == nil })
}

// TestPredecessorAndCopy: a process on the same directory after a kill (its
// member still live) serves at once; a live copy of the directory is a
// conflict for both.
func TestPredecessorAndCopy(t *testing.T) {
	su := newSetup(t)
	dir := filepath.Join(t.TempDir(), "data")
	su.killed(t, dir)
	s := openStore(t, dir)
	if err := su.start(t, s).Admit(); err != nil {
		t.Fatalf("a restart on the same directory while the killed predecessor's member lives: Admit = %v", err)
	}
	if s.Floor() != 0 {
		t.Fatalf("a restart raised the floor to %d", s.Floor())
	}

	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dir, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	twin := openStore(t, copyDir)
	if twin.ID() != s.ID() {
		t.Fatal("a copy of the directory has another id")
	}
	at := su.start(t, twin)
	if c := conflict(at); c == nil || !c.Copy {
		t.Fatalf("a copy of a live store's directory: Admit = %v, want a conflict naming a copy", at.Admit())
	}
}

// TestPredecessorSeenAlive: a member taken for a dead predecessor (a
// block-level copy of the directory keeps its inode, so nothing else
// tells) that renews is a live copy: a conflict while it lives, and the
// store's floor goes above the bound in Redis.
func TestPredecessorSeenAlive(t *testing.T) {
	su := newSetup(t)
	dir := filepath.Join(t.TempDir(), "data")
	a := su.killed(t, dir)
	direct := su.keysConn(t)
	s := openStore(t, dir)
	b := su.start(t, s)
	if err := b.Admit(); err != nil {
		t.Fatalf("restart beside a dead predecessor's member: %v", err)
	}
	direct.Do("ZADD", a.liveKey, liveUntil(2*time.Second), a.member) // it renews: alive
	waitFor(t, "the renewing predecessor seen as a live copy", func() bool {
		c := conflict(b)
		return c != nil && c.Copy
	})
	if s.Floor() == 0 {
		t.Fatal("finding a live copy did not raise the floor")
	}
	waitFor(t, "lock commands admitted once the copy's member expired", func() bool { return b.Admit() == nil })
}

// TestPredecessorLateHeartbeat: a heartbeat the killed predecessor sent
// before the restart, reaching Redis only after it (it sat in a socket, or
// in a stalled Redis's input), moves the predecessor's score but is no
// live copy: the restarted process goes on serving with its floor where it
// was. One the predecessor's member sends after the restart began is.
func TestPredecessorLateHeartbeat(t *testing.T) {
	su := newSetup(t)
	dir := filepath.Join(t.TempDir(), "data")
	a := su.killed(t, dir)
	s := openStore(t, dir)
	b := su.start(t, s)
	if err := b.Admit(); err != nil {
		t.Fatalf("restart beside a dead predecessor's member: %v", err)
	}
	su.beat(t, a, b.began-1000) // sent a second before the restart began, run now
	for range 4 {
		awaitRound(t, b)
		if err := b.Admit(); err != nil || s.Floor() != 0 {
			t.Fatalf("after the predecessor's late heartbeat: Admit = %v, floor %d; want admitted, floor 0", err, s.Floor())
		}
	}
	su.beat(t, a, time.Now().UnixMilli()) // sent now: the member is alive
	waitFor(t, "the predecessor renewing now seen as a live copy", func() bool {
		c := conflict(b)
		return c != nil && c.Copy
	})
	if s.Floor() == 0 {
		t.Fatal("finding a live copy did not raise the floor")
	}
}

// TestStartAloneAndLateHeartbeat: a process starting alone
// (Options.StartAlone) beside another store's member waits for it to run
// out while it does not renew, and a heartbeat of it sent before this
// process began, run late, is no renewal; one sent since is, and Start
// refuses.
func TestStartAloneAndLateHeartbeat(t *testing.T) {
	su := newSetup(t)
	other := su.killed(t, t.TempDir())
	s := openStore(t, t.TempDir())
	t.Cleanup(func() { s.Close() })
	starting := func() (*Authority, chan error) {
		a := New(Options{Backend: su.be, Writer: su.writer, Store: s, ReplicaTimeout: 200 * time.Millisecond, Interval: interval, StartAlone: true})
		started := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			started <- a.Start(ctx)
		}()
		return a, started
	}

	a, started := starting()
	time.Sleep(10 * interval) // awaitAlone has read the other member (a quarter interval apart)
	su.beat(t, other, a.began-1000)
	time.Sleep(10 * interval)
	select {
	case err := <-started:
		t.Fatalf("Start beside a member moved by a heartbeat sent before it began = %v, want it waiting", err)
	default:
	}
	su.beat(t, other, time.Now().UnixMilli()) // renewing now: alive
	var c *ConflictError
	if err := <-started; !errors.As(err, &c) {
		t.Fatalf("Start beside a renewing member = %v, want a conflict", err)
	}

	a, started = starting()
	t.Cleanup(a.Close)
	time.Sleep(10 * interval)
	su.keysConn(t).Do("ZREM", other.liveKey, other.member) // it ran out
	if err := <-started; err != nil {
		t.Fatalf("Start once the other member is gone = %v", err)
	}
	if err := a.Admit(); err != nil {
		t.Fatalf("Admit after starting alone = %v", err)
	}
}

// beat runs a's heartbeat as Redis would run one a sent at sent (Unix ms).
func (su *setup) beat(t *testing.T, a *Authority, sent int64) {
	t.Helper()
	node := su.be.MasterForKey([]byte(a.liveKey))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := heartbeatScript.Run(ctx, node.Client, []string{a.liveKey, a.boundKey},
		a.member, a.liveFor.Milliseconds(), maxMembers, keysDB, 0, sent).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestSentFieldsFollowMembers: a member's sent field lives as long as the
// member: a heartbeat writes it, a member that expired loses it at a
// later round, a clean leave takes it.
func TestSentFieldsFollowMembers(t *testing.T) {
	su := newSetup(t)
	s := openStore(t, t.TempDir())
	a := su.start(t, s)
	direct := su.keysConn(t)
	sent := func(member string) bool {
		return string(direct.Do("HEXISTS", a.boundKey, "sent:"+member)) == ":1\r\n"
	}
	waitFor(t, "the authority's own sent field", func() bool { return sent(a.member) })
	const gone = "gone-store/gone-run/gone-store"
	node := su.be.MasterForKey([]byte(a.liveKey))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := heartbeatScript.Run(ctx, node.Client, []string{a.liveKey, a.boundKey},
		gone, 1, maxMembers, keysDB, 0, time.Now().UnixMilli()).Err(); err != nil { // lives 1 ms
		t.Fatal(err)
	}
	waitFor(t, "the expired member's sent field dropped", func() bool { return !sent(gone) })
	if !sent(a.member) {
		t.Fatal("the live member's sent field went with the expired one's")
	}
	a.Close()
	if sent(a.member) {
		t.Fatal("a clean leave left its sent field")
	}
}

// awaitRound waits until a has published the verdict of a round that
// began after the call.
func awaitRound(t *testing.T, a *Authority) {
	t.Helper()
	for range 2 { // the round under way may have read Redis before the call
		a.publishedMu.Lock()
		news := a.published
		a.publishedMu.Unlock()
		select {
		case <-news:
		case <-time.After(20 * time.Second):
			t.Fatal("no heartbeat round within 20s")
		}
	}
}

// TestJoinAdoptsRecordTokens: with no bound in Redis (a first start, or
// Redis lost it) a store adopts the highest token in the owner records
// and writes the bound.
func TestJoinAdoptsRecordTokens(t *testing.T) {
	su := newSetup(t)
	direct := testenv.Dial(t, su.redis.Addr)
	direct.Do("HSET", "fenceproxy:lock:{a}", "owner", "x", "token", "5000")
	direct.Do("HSET", "fenceproxy:lock:{b}", "owner", "y", "token", "70")
	direct.Do("SET", "fenceproxy:lock:{a}:delay", "1")
	s := openStore(t, t.TempDir())
	a := su.start(t, s)
	if s.Floor() != 5001 {
		t.Fatalf("floor after joining beside a record with token 5000 = %d, want 5001", s.Floor())
	}
	if tok, err := s.NextToken(); err != nil || tok <= 5001 {
		t.Fatalf("NextToken = %d, %v", tok, err)
	}
	if st := a.Stats(); st.RedisBound != s.SyncedBound() || st.Floor != 5001 {
		t.Fatalf("Stats = %+v, want the Redis bound %d and floor 5001", st, s.SyncedBound())
	}
}

// TestJoinAdoptsStringRecordTokens: today's owner records are strings
// ("token term acquired renewed addr-length addr owner"); with no bound in
// Redis, their tokens are adopted as the older hashes' are. (The scan read
// only hashes, so a record of today's layout was not seen.)
func TestJoinAdoptsStringRecordTokens(t *testing.T) {
	su := newSetup(t)
	direct := testenv.Dial(t, su.redis.Addr)
	direct.Do("SET", "fenceproxy:lock:{a}", "6000 0 1 1 9 127.0.0.1owner-a")
	direct.Do("HSET", "fenceproxy:lock:{b}", "owner", "y", "token", "70")
	s := openStore(t, t.TempDir())
	su.start(t, s)
	if s.Floor() != 6001 {
		t.Fatalf("floor after joining beside a string record with token 6000 = %d, want 6001", s.Floor())
	}
}

// TestBoundRewrittenAfterLoss: Redis loses the bound while the store runs;
// a round writes it again.
func TestBoundRewrittenAfterLoss(t *testing.T) {
	su := newSetup(t)
	s := openStore(t, t.TempDir())
	a := su.start(t, s)
	direct := su.keysConn(t)
	direct.Do("FLUSHALL")
	want := strconv.FormatUint(s.SyncedBound(), 10)
	waitFor(t, "the bound rewritten", func() bool {
		b, _ := testenv.ParseBulk(direct.Do("HGET", a.boundKey, "bound"))
		return string(b) == want
	})
	if s.Floor() != 0 {
		t.Fatalf("a store whose backend lost the bound raised its floor to %d", s.Floor())
	}
}

// TestHeartbeatLapse: while Redis answers nothing, the last round's
// admission runs out by itself; it comes back with Redis.
func TestHeartbeatLapse(t *testing.T) {
	su := newSetup(t)
	a := su.start(t, openStore(t, t.TempDir()))
	su.redis.Stop()
	waitFor(t, "lock commands refused with Redis stopped", func() bool { return errors.Is(a.Admit(), ErrUnconfirmed) })
	su.redis.Cont()
	waitFor(t, "lock commands admitted again", func() bool { return a.Admit() == nil })
}

// lapse makes a's last round look late, as a stalled loop leaves it.
func lapse(a *Authority) {
	a.status.Store(&status{joined: true, validUntil: time.Now().Add(-time.Millisecond)})
}

// TestLateRoundWaitedFor: a command that may wait is not refused because
// the last round is late; it asks for a round and is admitted by it. The
// rounds are ten seconds apart, so only the round AdmitWithin asks for
// can admit it.
func TestLateRoundWaitedFor(t *testing.T) {
	su := newSetup(t)
	a := su.startEvery(t, openStore(t, t.TempDir()), MaxInterval)
	lapse(a)
	if err := a.Admit(); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("Admit after the round's admission ran out = %v, want ErrUnconfirmed", err)
	}
	// Well before the next round of its own.
	ctx, cancel := context.WithTimeout(context.Background(), MaxInterval/2)
	defer cancel()
	if err := a.AdmitWithin(ctx); err != nil {
		t.Fatalf("AdmitWithin with Redis up and the round merely late = %v, want admitted", err)
	}
	if err := a.Admit(); err != nil {
		t.Fatalf("Admit after the round AdmitWithin asked for = %v", err)
	}
}

// TestLateRoundRefusedWithoutRedis: with Redis answering nothing, a
// command that may wait is still refused, within its patience (not its
// caller's deadline).
func TestLateRoundRefusedWithoutRedis(t *testing.T) {
	su := newSetup(t)
	a := su.start(t, openStore(t, t.TempDir()))
	su.redis.Stop()
	defer su.redis.Cont()
	lapse(a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.AdmitWithin(ctx); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("AdmitWithin with Redis stopped = %v, want ErrUnconfirmed", err)
	}
	if ctx.Err() != nil {
		t.Fatal("AdmitWithin waited for its caller's deadline, not its own patience")
	}
}

// scriptCalls is how many script calls Redis at c has counted (EVAL and
// EVALSHA, refused ones too) since its last CONFIG RESETSTAT.
func scriptCalls(t *testing.T, c *testenv.Conn) int {
	t.Helper()
	info, ok := testenv.ParseBulk(c.Do("INFO", "commandstats"))
	if !ok {
		t.Fatal("INFO commandstats: not a bulk string")
	}
	n := 0
	for _, line := range strings.Split(string(info), "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		if name != "cmdstat_eval" && name != "cmdstat_evalsha" || !ok {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if k, v, _ := strings.Cut(kv, "="); k == "calls" || k == "rejected_calls" {
				x, _ := strconv.Atoi(v)
				n += x
			}
		}
	}
	return n
}

// TestAskedRoundsKeptApart: while every round fails at once (the live set
// is not a sorted set: the heartbeat script is refused), lock commands
// that each ask for a round do not run rounds back to back: they are a
// quarter interval apart at least, however many ask.
func TestAskedRoundsKeptApart(t *testing.T) {
	const iv = 400 * time.Millisecond
	su := newSetup(t)
	a := su.startEvery(t, openStore(t, t.TempDir()), iv)
	c := su.keysConn(t)
	c.Do("DEL", a.liveKey)
	c.Do("SET", a.liveKey, "not a sorted set")
	t.Cleanup(func() { c.Do("DEL", a.liveKey) })
	c.Do("CONFIG", "RESETSTAT")
	lapse(a)
	start := time.Now()
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < time.Second {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
				_ = a.AdmitWithin(ctx)
				cancel()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rounds := scriptCalls(t, c)
	t.Logf("%d rounds in %v", rounds, elapsed)
	if most := int(elapsed/(iv/4)) + 2; rounds > most {
		t.Fatalf("%d heartbeat rounds in %v while every round failed and 32 clients kept asking; want at most %d (a quarter interval apart)", rounds, elapsed, most)
	}
	if rounds == 0 {
		t.Fatal("no round ran: the test did not make Redis refuse them")
	}
}

// TestKeysInHighestDatabase: in front of a standalone Redis the two keys
// live in its highest database, whether CONFIG says how many there are or
// SELECT's range has to; database 0 stays the clients'.
func TestKeysInHighestDatabase(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		db   int64
	}{
		{"default", nil, 15},
		{"databases 4", []string{"--databases", "4"}, 3},
		{"databases 1", []string{"--databases", "1"}, 0},
		{"CONFIG renamed", []string{"--databases", "40", "--rename-command", "CONFIG", ""}, 39},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testenv.StartRedis(t, testenv.RedisOptions{Args: tc.args})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			be, err := upstream.Connect(ctx, upstream.Options{Seeds: []string{r.Addr}, PoolSize: 1, WriterConns: 1, ReplicaTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(be.Close)
			su := &setup{redis: r, be: be, writer: lockwriter.New(lockwriter.Options{Backend: be, ReplicaTimeout: 200 * time.Millisecond})}
			a := su.start(t, openStore(t, t.TempDir()))
			if err := a.Admit(); err != nil {
				t.Fatalf("Admit = %v", err)
			}
			if got := a.Stats().DB; got != tc.db {
				t.Fatalf("Stats().DB = %d, want %d", got, tc.db)
			}
			c := testenv.Dial(t, r.Addr)
			db := strconv.FormatInt(tc.db, 10)
			c.Do("SELECT", db)
			for _, k := range []string{a.liveKey, a.boundKey} {
				if got := string(c.Do("EXISTS", k)); got != ":1\r\n" {
					t.Errorf("EXISTS %s in database %s = %s", k, db, got)
				}
			}
			if tc.db != 0 {
				c.Do("SELECT", "0")
				if got := string(c.Do("DBSIZE")); got != ":0\r\n" {
					t.Errorf("DBSIZE of database 0 = %s, want 0: the authority's keys are not the clients'", got)
				}
			}
		})
	}
}

// TestLegacyKeysInDatabaseZero: an earlier fenceproxy kept both keys in
// database 0. Its bound there is honoured (an upgrade that also lost the
// fence store does not go back) and deleted once covered; its live member
// there is a conflict for both (this process writes its member there too
// while one lives), and this member leaves database 0 when it is gone.
func TestLegacyKeysInDatabaseZero(t *testing.T) {
	su := newSetup(t)
	zero := testenv.Dial(t, su.redis.Addr)
	const boundKey, liveKey = "fenceproxy:lock:{authority}:bound", "fenceproxy:lock:{authority}:live"
	zero.Do("HSET", boundKey, "bound", "1000000", "store", "old-store", "run", "old-run")
	s := openStore(t, t.TempDir())
	a := su.start(t, s)
	if err := a.Admit(); err != nil {
		t.Fatalf("Admit = %v", err)
	}
	if s.Floor() <= 1000000 {
		t.Fatalf("floor %d beside a bound of 1000000 in database 0, want above it", s.Floor())
	}
	if got := string(zero.Do("EXISTS", boundKey)); got != ":0\r\n" {
		t.Fatalf("the old bound in database 0 is still there (EXISTS = %s) although the new one covers it", got)
	}

	old := "old-store/old-run/old-store"
	zero.Do("ZADD", liveKey, liveUntil(time.Minute), old)
	waitFor(t, "a conflict with the earlier process's member in database 0", func() bool {
		c := conflict(a)
		return c != nil && len(c.Stores) == 1 && c.Stores[0] == "old-store"
	})
	waitFor(t, "this member written to database 0 as well", func() bool {
		return string(zero.Do("ZSCORE", liveKey, a.member)) != "$-1\r\n"
	})
	zero.Do("ZREM", liveKey, old)
	waitFor(t, "lock commands admitted again", func() bool { return a.Admit() == nil })
	waitFor(t, "this member gone from database 0", func() bool { return string(zero.Do("DBSIZE")) == ":0\r\n" })
}
