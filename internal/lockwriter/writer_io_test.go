package lockwriter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// TestBatchOnABrokenConnection: a lock connection that breaks with a batch
// on it (its scripts ran on Redis, their replies and the WAIT's were lost
// on the way back) fails every write of the batch with an unknown outcome,
// its script's reply and its acknowledgements alike, never "not sent"; the
// writer's next batch is turned away as not sent while the connection is
// down, then goes on a fresh connection and is answered. Real Redis, the
// break made by a Link that drops the replies and then closes the
// connection (a partition that outlasted TCP).
func TestBatchOnABrokenConnection(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	link := testenv.StartLink(t, master.Addr)
	be := connect(t, link.Addr)
	node := be.Masters()[0]
	wr := New(Options{Backend: be, MinReplicas: 1, ReplicaTimeout: 2 * time.Second})
	conns := make(chan *backend.SyncConn, 2)
	node.ServeLockWrites(func(conn *backend.SyncConn, acked bool) {
		if acked {
			conns <- conn
		}
		<-node.Closed()
	})
	conn := <-conns
	var st writerState
	const incr = "return redis.call('INCR', KEYS[1])"
	batch := func(prefix string, n int) []*Write {
		ws := make([]*Write, n)
		for i := range ws {
			key := prefix + strconv.Itoa(i)
			ws[i] = &Write{call: ScriptCall{Source: incr, Keys: []string{key}}, wantAcks: true, node: node}
			ws[i].replied.Add(1)
			ws[i].reply = resp.NewReply(&ws[i].replied)
		}
		return ws
	}
	for i, w := range send(wr, conn, batch("warm", 1), &st) {
		if n, err := w.Acks(); n != 1 || err != nil {
			t.Fatalf("write %d before the break: %d acks, %v", i, n, err)
		}
	}
	before := conn.LocalAddr()

	link.Drop(t, testenv.Downstream)
	const n = 8
	out := make(chan []*Write, 1)
	go func() { out <- send(wr, conn, batch("cut", n), &st) }()
	m := testenv.Dial(t, master.Addr)
	deadline := time.Now().Add(10 * time.Second)
	for string(m.Do("GET", "cut"+strconv.Itoa(n-1))) != "$1\r\n1\r\n" { // the batch's scripts ran
		if time.Now().After(deadline) {
			t.Fatalf("the batch's scripts did not run on Redis within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	link.Heal(t) // closes the connection the replies were dropped on
	var ws []*Write
	select {
	case ws = <-out:
	case <-time.After(10 * time.Second):
		t.Fatalf("the batch on the broken connection was not answered within 10s")
	}
	for i, w := range ws {
		if v, err := w.Reply(); !errors.Is(err, upstream.ErrOutcomeUnknown) {
			t.Errorf("write %d of the broken batch (it ran): %v, %v; want an unknown outcome", i, v, err)
		}
		if _, err := w.Acks(); !errors.Is(err, upstream.ErrOutcomeUnknown) {
			t.Errorf("write %d of the broken batch: acks %v; want an unknown outcome", i, err)
		}
	}

	// The next batches: not sent while the connection is down, then on a
	// fresh one.
	for attempt := 0; ; attempt++ {
		if attempt == 1000 {
			t.Fatalf("no batch was answered on a fresh connection after %d attempts", attempt)
		}
		prefix := fmt.Sprintf("after%d-", attempt)
		w := send(wr, conn, batch(prefix, 1), &st)[0]
		_, err := w.Reply()
		if errors.Is(err, upstream.ErrUnavailable) {
			if got := string(m.Do("EXISTS", prefix+"0")); got != ":0\r\n" {
				t.Fatalf("a write answered \"not sent\" ran on Redis")
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("the first write after the break: %v; want it answered, or turned away as not sent", err)
		}
		if n, err := w.Acks(); n != 1 || err != nil {
			t.Fatalf("the first write after the break: %d acks, %v", n, err)
		}
		break
	}
	if after := conn.LocalAddr(); after == before || after == "" {
		t.Fatalf("the next batch went on %q, the broken connection was %q: want a fresh one", after, before)
	}
}

// send runs ws as one batch on conn, as the writer's loop does, and
// returns them.
func send(wr *Writer, conn *backend.SyncConn, ws []*Write, st *writerState) []*Write {
	wr.sendBatch(conn, ws, st)
	return ws
}

// TestScriptReplyBeforeItsWAIT: a write's script reply reaches its caller
// while its batch's WAIT is still out (the writer completes each reply as
// it reads it), so the caller can fsync meanwhile; the acknowledgements
// follow when the replica answers. The replica is stopped until the script
// reply is in, and WAIT's timeout is longer than the test: no clock decides.
func TestScriptReplyBeforeItsWAIT(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	_, wr := writerOn(t, master.Addr, 1, time.Hour)
	call := ScriptCall{Source: "return redis.call('INCR', KEYS[1])", Keys: []string{"k"}}
	if n, err := wr.Start(context.Background(), "k", call, true).Acks(); n != 1 || err != nil {
		t.Fatalf("a write with the replica up: %d acks, %v", n, err)
	}

	replica.Stop()
	stopped := true
	defer func() {
		if stopped {
			replica.Cont()
		}
	}()
	// Start itself returns once the script's reply is in.
	started := make(chan *Write, 1)
	go func() { started <- wr.Start(context.Background(), "k", call, true) }()
	var w *Write
	select {
	case w = <-started:
	case <-time.After(10 * time.Second):
		t.Fatalf("no script reply within 10s while its WAIT was out")
	}
	if v, err := w.Reply(); v != int64(2) || err != nil {
		t.Fatalf("the script's reply with the replica stopped: %v, %v", v, err)
	}
	acked := make(chan error, 1)
	go func() {
		n, err := w.Acks()
		if err == nil && n != 1 {
			err = fmt.Errorf("%d acks, want 1", n)
		}
		acked <- err
	}()
	select {
	case err := <-acked:
		t.Fatalf("the WAIT was answered with the replica stopped: %v", err)
	default:
	}
	replica.Cont()
	stopped = false
	select {
	case err := <-acked:
		if err != nil {
			t.Fatalf("the WAIT after the replica came back: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the WAIT was not answered within 10s of the replica's return")
	}
}

// TestRoundsOverlap: with two connections that carry WAITs
// (--lock-conns 2), writes that come while one batch's WAIT is out leave
// on the other connection once that WAIT has been out for overlapAfter
// (the stopped replica holds it), their scripts answered with it still
// out, instead of waiting for it to end first; never sooner (a round is
// handed on only past its share, so that short rounds go one after
// another); with one connection they wait. Real Redis; the replica stopped holds the first WAIT. (Not all
// three need be answered: the other connection's own round has a WAIT the
// stopped replica holds too, and a write that misses that round, as a slow
// goroutine's may on a loaded machine, waits behind it. CI once saw 2 of 3.)
func TestRoundsOverlap(t *testing.T) {
	for _, conns := range []int{1, 2} {
		t.Run(fmt.Sprintf("lock-conns=%d", conns), func(t *testing.T) {
			master := testenv.StartRedis(t, testenv.RedisOptions{})
			replica := testenv.StartReplica(t, master)
			_, wr := writerOn(t, master.Addr, conns, time.Minute)
			const incr = "return redis.call('INCR', KEYS[1])"
			start := func(key string) *Write {
				return wr.Start(context.Background(), key, ScriptCall{Source: incr, Keys: []string{key}}, true)
			}
			if n, err := start("warm").Acks(); n != 1 || err != nil {
				t.Fatalf("warm-up write: %d acks, %v", n, err)
			}
			replica.Stop()
			sent := time.Now()      // the first round leaves after this
			first := start("first") // its script answered, its WAIT held by the stopped replica
			if _, err := first.Reply(); err != nil {
				t.Fatal(err)
			}
			later := make(chan *Write, 3)
			for i := range 3 {
				go func() { later <- start("later" + strconv.Itoa(i)) }()
			}
			answered := 0
			deadline := time.After(10 * time.Second)
			if conns == 1 {
				deadline = time.After(2 * time.Second) // none is to come
			}
		wait:
			for answered < 3 {
				select {
				case w := <-later:
					if _, err := w.Reply(); err != nil {
						t.Fatal(err)
					}
					if since := time.Since(sent); since < overlapAfter {
						t.Fatalf("a later write answered %v after the first round left, before overlapAfter (%v): the turn was handed on too soon", since, overlapAfter)
					}
					answered++
				case <-deadline:
					break wait
				}
			}
			replica.Cont()
			if n, err := first.Acks(); n != 1 || err != nil {
				t.Fatalf("first write: %d acks, %v", n, err)
			}
			switch {
			case conns == 1 && answered != 0:
				t.Fatalf("one connection: %d later writes answered while the first WAIT was out, want none (Redis holds what follows a WAIT)", answered)
			case conns == 2 && answered == 0:
				t.Fatalf("two connections: none of 3 later writes answered in 10s while the first WAIT was out: the rounds do not overlap")
			}
		})
	}
}

// TestPassAfter: a round's writer hands the turn on after its share of a
// round (a half with two writers), never before overlapAfter and never
// after overlapBy; the average moves an eighth at a time.
func TestPassAfter(t *testing.T) {
	nw := newNodeWriter()
	for _, c := range []struct {
		writers     int32
		round, want time.Duration
	}{
		{0, 0, overlapAfter},
		{1, 4 * time.Millisecond, 4 * time.Millisecond},
		{2, 200 * time.Microsecond, overlapAfter},
		{4, 1200 * time.Microsecond, 300 * time.Microsecond},
		{2, 4 * time.Millisecond, 2 * time.Millisecond},
		{2, 16 * time.Millisecond, 8 * time.Millisecond},
		{2, time.Second, 10 * time.Millisecond},
		{4, 3 * time.Millisecond, 750 * time.Microsecond},
		{4, 8 * time.Millisecond, 2 * time.Millisecond},
	} {
		nw.ackedWriters.Store(c.writers)
		nw.roundNanos.Store(int64(c.round))
		if d := nw.passAfter(); d != c.want {
			t.Errorf("%d writers, rounds of %v: pass after %v, want %v", c.writers, c.round, d, c.want)
		}
	}
	nw.roundNanos.Store(0)
	nw.roundDone(8 * time.Millisecond)
	nw.roundDone(0)
	if got := time.Duration(nw.roundNanos.Load()); got != 7*time.Millisecond {
		t.Errorf("average after 8ms then 0: %v, want 7ms (an eighth moves)", got)
	}
}

// TestShortRoundsKeepTheirConnection: with two connections that carry
// WAITs and a replica next door, rounds that end within passAfter go one
// after another on the connection that ran the first (its writer keeps the
// turn), not on each connection in turn, which wakes the other writer for
// every round. Seen from Redis: MONITOR shows which client sent each
// round's WAIT. passAfter is held at its longest (overlapBy) by a long
// average, so that only a round slower than that (a stall of the machine)
// may move the turn.
func TestShortRoundsKeepTheirConnection(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	be, wr := writerOn(t, master.Addr, 2, time.Minute)
	const incr = "return redis.call('INCR', KEYS[1])"
	write := func(key string) {
		t.Helper()
		if n, err := wr.Start(context.Background(), key, ScriptCall{Source: incr, Keys: []string{key}}, true).Acks(); n != 1 || err != nil {
			t.Fatalf("write %s: %d acks, %v", key, n, err)
		}
	}
	write("warm") // starts the writers
	wr.writers(be.MasterForKey([]byte("k"))).roundNanos.Store(int64(time.Second))

	monitor := testenv.Dial(t, master.Addr)
	if r := monitor.Do("MONITOR"); string(r) != "+OK\r\n" {
		t.Fatalf("MONITOR = %q", r)
	}
	const rounds = 20
	for i := range rounds {
		write("k" + strconv.Itoa(i))
	}
	var senders []string // the client of each round's WAIT, in order
	for len(senders) < rounds {
		line, err := monitor.ReadReply()
		if err != nil {
			t.Fatalf("reading MONITOR after %d WAITs: %v", len(senders), err)
		}
		// +1733530000.123456 [0 127.0.0.1:54321] "WAIT" "1" "60000"
		if _, rest, ok := strings.Cut(string(line), " ["); ok && strings.Contains(rest, `] "WAIT"`) {
			senders = append(senders, strings.Fields(rest)[1])
		}
	}
	switches := 0
	for i := 1; i < len(senders); i++ {
		if senders[i] != senders[i-1] {
			switches++
		}
	}
	if switches > 2 {
		t.Fatalf("%d of %d rounds went on another connection than the one before (%v): short rounds hand the turn on, want them kept", switches, rounds-1, senders)
	}
}

// writerOn is a Writer for the master at addr with conns lock connections
// of each kind, MinReplicas 1 and replicaTimeout; t.Cleanup closes its
// backend.
func writerOn(t *testing.T, addr string, conns int, replicaTimeout time.Duration) (upstream.Backend, *Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	be, err := upstream.Connect(ctx, upstream.Options{Seeds: []string{addr}, PoolSize: 1, WriterConns: conns, ReplicaTimeout: replicaTimeout, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	return be, New(Options{Backend: be, MinReplicas: 1, ReplicaTimeout: replicaTimeout})
}
