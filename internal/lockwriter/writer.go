package lockwriter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// maxWriteBatch bounds how many lock writes share one WAIT.
const maxWriteBatch = 256

// writeQueueLen bounds the lock writes queued for one master's writers, of
// each kind; a Start beyond it waits (or ends with its context).
const writeQueueLen = 4096

// ScriptCall is one invocation of a Lua script: with EVALSHA if SHA (the
// hex SHA-1 of Source) is set, else with EVAL and the whole source. A caller
// that sets SHA resends with EVAL when Redis answers NOSCRIPT (it restarted
// or ran SCRIPT FLUSH): the script did not run.
type ScriptCall struct {
	Source string
	SHA    string
	Keys   []string
	Args   ScriptArgs
	// Op, if set, makes the call one operation of a batch script (Source
	// and SHA are then the batch script's, the same for every call with an
	// Op; Keys are the operation's three; Args its own arguments): the
	// Writer runs it in one call with the other operations of its batch
	// that go to the same slot (see sendBatch).
	Op Op
}

// Op names one operation of a batch script: the letter that starts its
// arguments in the batch's call. Zero is no operation: the call is a
// script of its own. The letters and what they do are the script's
// owner's (internal/locks); the Writer only batches them.
type Op byte

// Write is one lock write in flight. The script's reply (Reply) arrives
// before the replicas' acknowledgements (Acks): the WAIT that counts them
// travels right behind the script in the same pipeline, and Redis answers the
// script as soon as it ran. A caller can do its own slow step, such as an
// fsync, in between.
type Write struct {
	call     ScriptCall
	wantAcks bool
	node     *upstream.Node // the master it went to; nil if none was reachable

	reply   *resp.Reply // &own, for a Write of StartOn
	own     resp.Reply  // kept in the Write: one allocation less per write
	replied sync.WaitGroup
	ack     *ackWait // nil unless the batch sent a WAIT for this write
	err     error    // set, before replied is done, if the write was never sent
	// then, for a Write of StartThen, is told once its reply is in (or its
	// failure), on the goroutine that completed it. For a retry by Start:
	// sha is the caller's SHA of call (call goes with its source on its
	// first call to a master), key its key, wr the writer.
	then ReplyIn
	sha  string
	key  string
	wr   *Writer
}

// ReplyIn is a caller of StartThen: it is told once the script's reply is
// in, on the goroutine that read it, which it must not block. (An
// interface, not a func: the caller's own struct is the callback, with no
// closure to allocate per write.)
type ReplyIn interface {
	ReplyIn(w *Write)
}

// AcksIn is a caller of AcksThen, told once the WAIT's reply is in.
type AcksIn interface {
	AcksIn()
}

// Complete is how a Write of StartThen learns that its script's reply is
// in (its own reply's Completer): it ends replied, so Reply and Raw do not
// wait, and tells then, unless the call must go again as Start sends it
// again (judgeReply); Start then does that, on a goroutine of its
// own, and then is told its outcome.
func (w *Write) Complete(*resp.Reply) {
	w.replied.Done()
	raw, err := w.Raw()
	if w.wr.judgeReply(w.node, w.sha, w.call, raw, err, true) != sentDone {
		asked := w.call
		asked.SHA = w.sha
		go func() { w.then.ReplyIn(w.wr.Start(context.Background(), w.key, asked, w.wantAcks)) }()
		return
	}
	w.then.ReplyIn(w)
}

// ackWait is one WAIT shared by every write of a batch.
type ackWait struct {
	reply *resp.Reply
	done  sync.WaitGroup
	// thens run once the WAIT's reply is in (AcksThen), on the goroutine
	// that read it; in is set then, under mu.
	mu     sync.Mutex
	in     bool
	thens  []AcksIn
	inline [8]AcksIn // thens' first room: no allocation for a small batch
}

// Complete ends the WAIT (its reply's Completer): Acks stops waiting, and
// every AcksThen registered so far runs.
func (a *ackWait) Complete(*resp.Reply) {
	a.mu.Lock()
	a.in = true
	thens := a.thens
	a.thens = nil
	a.mu.Unlock()
	a.done.Done()
	for _, t := range thens {
		t.AcksIn()
	}
}

// Unsent returns a Write that failed before it was sent, with err.
func Unsent(err error) *Write { return &Write{err: err} }

// Replied returns a Write already answered: reply is its script's reply
// and acks, unless nil, its WAIT's, each raw RESP. It stands for a write
// where no Redis is (a stand-in ScriptRunner in tests), and reads them as
// a sent write's.
func Replied(reply, acks []byte) *Write {
	w := &Write{reply: &resp.Reply{Buf: reply}}
	if acks != nil {
		w.ack = &ackWait{reply: &resp.Reply{Buf: acks}, in: true}
	}
	return w
}

// fail ends a write that will not be sent: err is its outcome.
func (w *Write) fail(err error) {
	w.err = err
	if w.then != nil {
		w.Complete(nil) // as Start would: retried where it retries
		return
	}
	w.replied.Done()
}

// Reply waits for the script's reply: nil for a null reply; the error is the
// script's own (a resp.Error), upstream.ErrOutcomeUnknown,
// upstream.ErrUnavailable or a refused node's error.
func (w *Write) Reply() (any, error) {
	w.replied.Wait()
	if w.err != nil {
		return nil, w.err
	}
	return decode(w.reply)
}

// Raw waits for the script's reply and returns its bytes as Redis wrote
// them, or the error that kept it from Redis (upstream.ErrUnavailable: not
// sent; backend.ErrLost: it may have run; a refused node's error).
func (w *Write) Raw() ([]byte, error) {
	w.replied.Wait()
	if w.err != nil {
		return nil, w.err
	}
	return w.reply.Buf, w.reply.Err
}

// AcksThen tells t once Acks would not wait: at once if the WAIT's reply
// is in (or there is none), else on the goroutine that reads it. Call it
// only once the script's reply is in.
func (w *Write) AcksThen(t AcksIn) {
	a := w.ack
	if w.err != nil || a == nil {
		t.AcksIn()
		return
	}
	a.mu.Lock()
	if a.in {
		a.mu.Unlock()
		t.AcksIn()
		return
	}
	a.thens = append(a.thens, t)
	a.mu.Unlock()
}

// Acks waits for WAIT: how many replicas acknowledged every write up to this
// one. An error means the count is unknown (treat it as a shortfall whose
// write may or may not stand). Without a WAIT (no acknowledgements asked,
// or --min-replicas 0) it reports 0 at once.
func (w *Write) Acks() (int, error) {
	w.replied.Wait()
	if w.err != nil {
		return 0, w.err
	}
	if w.ack == nil {
		return 0, nil
	}
	w.ack.done.Wait()
	v, err := decode(w.ack.reply)
	if err != nil {
		// Besides a lost connection, Redis itself may end WAIT with an
		// error: -UNBLOCKED when its master steps down (CLUSTER FAILOVER).
		// Either way the count is unknown.
		return 0, fmt.Errorf("%w (WAIT: %v)", upstream.ErrOutcomeUnknown, err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, upstream.ErrOutcomeUnknown
	}
	return int(n), nil
}

// decode turns a reply into a value; a lost connection (or a reply that
// is not RESP) makes the write's outcome unknown.
func decode(r *resp.Reply) (any, error) {
	if r.Err != nil {
		if errors.Is(r.Err, backend.ErrLost) {
			return nil, upstream.ErrOutcomeUnknown
		}
		return nil, r.Err
	}
	v, err := resp.Parse(r.Buf)
	if errors.Is(err, resp.ErrBadReply) {
		return nil, upstream.ErrOutcomeUnknown
	}
	return v, err
}

// Options configure a Writer.
type Options struct {
	Backend upstream.Backend
	// MinReplicas and ReplicaTimeout are the WAIT sent behind a batch of
	// writes that want acknowledgements (none if MinReplicas is 0).
	MinReplicas    int
	ReplicaTimeout time.Duration
	// Commits, if set, is held while the replies of a round that came in
	// together are handed to their callers, one after another
	// (backend.SyncConn.ExchangeHeld): what the callers start on them (the
	// fence store's synced commit of each grant's token) then goes as one
	// commit for the round, not one for its first grant and one for the
	// rest, also when the round's grants are several batch-script calls
	// (one a hash slot, in front of a Redis Cluster). persist.Store is one
	// (HoldCommits).
	Commits backend.Holder
}

// Writer is the batched lock-script writer (the locks.ScriptRunner
// fenceproxy runs on): for each master it serves the node's lock connections
// (upstream.Node.ServeLockWrites) with writers of its own, WriterConns that
// send writes followed by a WAIT and as many that send writes without one
// (releases, undos, FENCE.EXEC), so that those never wait behind a WAIT.
// Concurrent writes to one master are batched: their scripts, then one
// WAIT for them all, in one write. Use one Writer per backend: a master's
// lock connections are served once.
type Writer struct {
	opts        Options
	routesByKey bool   // the backend's RoutesByKey, read once
	waitRequest []byte // the WAIT behind a batch, encoded once

	mu    sync.Mutex // making a master's writers
	nodes sync.Map   // *upstream.Node -> *nodeWriter, until the node closes
}

// New returns a Writer over opts.Backend's masters. A master's writers
// start with its first write.
func New(opts Options) *Writer {
	wr := &Writer{opts: opts, routesByKey: opts.Backend.RoutesByKey()}
	if opts.MinReplicas > 0 {
		wr.waitRequest = resp.AppendCommand(nil, [][]byte{
			[]byte("WAIT"),
			strconv.AppendInt(nil, int64(opts.MinReplicas), 10),
			strconv.AppendInt(nil, max(opts.ReplicaTimeout.Milliseconds(), 1), 10),
		})
	}
	return wr
}

// Start runs call on the master of key's slot, by EVALSHA when call has a
// SHA: one that meets NOSCRIPT (Redis restarted or flushed its scripts; the
// script did not run) goes again at once with EVAL and its source. In front
// of a Redis Cluster a script answered with MOVED, ASK, TRYAGAIN or
// CLUSTERDOWN, or not sent because its master was unreachable, did not run
// either: the topology is read again and the call retried, within
// upstream.RetryWindow. (Retrying after ASK rather than following it keeps a
// lock write and its WAIT on one connection; the slot's migration ends
// soon.) Start returns once the script's reply is in: what Reply, Raw and
// Acks wait for then is only the WAIT.
func (wr *Writer) Start(ctx context.Context, key string, call ScriptCall, wantAcks bool) *Write {
	began := time.Now()
	pause := 10 * time.Millisecond
	for {
		node := wr.master(key)
		sent := wr.sendable(node, call)
		w := wr.StartOn(ctx, node, sent, wantAcks)
		raw, err := w.Raw()
		switch wr.judgeReply(node, call.SHA, sent, raw, err, time.Since(began) <= upstream.RetryWindow) {
		case sentDone:
			return w
		case sentNoScript:
			call.SHA = ""
			continue
		}
		wr.opts.Backend.Refresh()
		select {
		case <-ctx.Done():
			return w
		case <-time.After(pause):
		}
		pause = min(2*pause, 250*time.Millisecond)
	}
}

// sendable is call as it goes to node: by SHA only once the script ran
// there. Its first call on a master goes with the source: an EVALSHA that
// meets NOSCRIPT has its batch's WAIT behind it all the same, and that
// WAIT holds the writer's connection for nothing, up to --replica-timeout
// when a replica is slow.
func (wr *Writer) sendable(node *upstream.Node, call ScriptCall) ScriptCall {
	if node != nil && call.SHA != "" && !wr.writers(node).hasScript(call.SHA) {
		call.SHA = ""
	}
	return call
}

// sentOutcome is what a sent call's reply says of it (Writer.judgeReply).
type sentOutcome int

const (
	sentDone       sentOutcome = iota // the reply stands
	sentNoScript                      // NOSCRIPT: it did not run; send it with its source
	sentRedirected                    // a redirect or an unreachable master: read the topology, send it again
)

// judgeReply judges the reply (raw, err) to sent, a call of the script sha on
// node, as Start does: NOSCRIPT (sent by SHA) forgets the script there; a
// reply the backend says to retry after a refresh is retried, if mayRetry
// (within the retry window); otherwise it stands, and a script that ran by
// SHA or source counts as known there.
func (wr *Writer) judgeReply(node *upstream.Node, sha string, sent ScriptCall, raw []byte, err error, mayRetry bool) sentOutcome {
	if err == nil && sent.SHA != "" && bytes.HasPrefix(raw, []byte("-NOSCRIPT")) {
		wr.writers(node).forgetScript(sha)
		return sentNoScript
	}
	if mayRetry && wr.opts.Backend.RetryAfterRefresh(raw, err) {
		return sentRedirected
	}
	if err == nil && sha != "" {
		wr.writers(node).addScript(sha) // it ran there
	}
	return sentDone
}

// RunAfter runs call, with no replica wait and no retry, on the master
// that ran prev, and returns its reply.
func (wr *Writer) RunAfter(ctx context.Context, prev *Write, call ScriptCall) (any, error) {
	return wr.StartOn(ctx, prev.node, call, false).Reply()
}

// Read runs a script that only reads on the master of key's slot, with no
// WAIT, the way Start runs a write: through MOVED, ASK and a failover, and
// with a write's errors. (It ran through the node's go-redis client
// before, which handed Redis's -MOVED and -ASK back to LOCK.INFO's client,
// backend address and all, and a dead master's connection error to the
// internal-error fallback.)
func (wr *Writer) Read(ctx context.Context, key string, call ScriptCall) (any, error) {
	return wr.Start(ctx, key, call, false).Reply()
}

// RoutesByKey reports whether the backend is a Redis Cluster.
func (wr *Writer) RoutesByKey() bool { return wr.opts.Backend.RoutesByKey() }

// MemoryPolicy is the last maxmemory-policy reading of key's master (no
// I/O); ok is false if no master of its slot is reachable.
func (wr *Writer) MemoryPolicy(key string) (p upstream.MemoryPolicy, ok bool) {
	node := wr.master(key)
	if node == nil {
		return p, false
	}
	return node.Memory(), true
}

// master is the master of key's slot. A backend that does not route by
// key (a standalone master) is asked without it, which through the Backend
// interface would cost every write an allocation.
func (wr *Writer) master(key string) *upstream.Node {
	if !wr.routesByKey {
		return wr.opts.Backend.MasterForKey(nil)
	}
	return wr.opts.Backend.MasterForKey([]byte(key))
}

// StartOn queues call to run on node itself (nil: unreachable), without
// Start's retries. If wantAcks, a WAIT for the minimum number of replicas
// follows it on the same connection.
func (wr *Writer) StartOn(ctx context.Context, node *upstream.Node, call ScriptCall, wantAcks bool) *Write {
	if node == nil {
		return Unsent(upstream.ErrUnavailable)
	}
	w := &Write{call: call, wantAcks: wantAcks, node: node}
	w.replied.Add(1)
	w.own = *resp.NewReply(&w.replied)
	w.reply = &w.own
	wr.writers(node).queue(ctx, w, true)
	return w
}

// StartThen is Start for a caller that must not wait (the serve loop, a
// lock request's completion): it queues call on the master of key's slot
// without waiting for room, and then is told once the script's reply is
// in, as Start would return it (Complete). It reports false, having done
// nothing, when the master's queue is full or no master is known: the
// caller uses Start.
//
// w is where the write is kept: a zero Write of the caller's own (a field
// of its request, which then is one allocation, not two), untouched by the
// caller from then on; nil allocates one.
func (wr *Writer) StartThen(w *Write, key string, call ScriptCall, wantAcks bool, then ReplyIn) bool {
	node := wr.master(key)
	if node == nil {
		return false
	}
	if w == nil {
		w = new(Write)
	}
	*w = Write{call: wr.sendable(node, call), wantAcks: wantAcks, node: node, then: then, sha: call.SHA, key: key, wr: wr}
	w.replied.Add(1)
	w.own = resp.ReplyTo(w)
	w.reply = &w.own
	return wr.writers(node).queue(context.Background(), w, false)
}

// nodeWriter is one master's queues of lock writes, each served by the
// writers (writeLoop) on the node's lock connections of its kind.
type nodeWriter struct {
	writes  chan *Write // writes that wait for replicas
	unacked chan *Write // writes that do not
	// closing: the node closed, and whatever is queued is answered
	// "unreachable" (retire). queuing counts the writes between their
	// look at closing and their send, so that retire sees each one sent
	// or turned away: none is left in a queue nobody reads.
	closing atomic.Bool
	queuing atomic.Int32
	// scripts holds the SHAs this master has run (EVAL caches a script),
	// so that Start sends EVALSHA only for those.
	scripts sync.Map
	// ackedTurn and unackedTurn each hold one token: the turn to read
	// that queue. A writer takes it before it reads its next batch and
	// keeps it while its rounds end in time; with a WAIT out longer than
	// passAfter it hands it on while the round is still out (writeLoop).
	ackedTurn, unackedTurn chan struct{}
	// roundNanos is how long a batch with a WAIT has taken (a moving
	// average), and ackedWriters how many writers send such batches.
	roundNanos   atomic.Int64
	ackedWriters atomic.Int32
}

// newNodeWriter is a nodeWriter with empty queues and each turn free.
func newNodeWriter() *nodeWriter {
	nw := &nodeWriter{writes: make(chan *Write, writeQueueLen), unacked: make(chan *Write, writeQueueLen),
		ackedTurn: make(chan struct{}, 1), unackedTurn: make(chan struct{}, 1)}
	nw.ackedTurn <- struct{}{}
	nw.unackedTurn <- struct{}{}
	return nw
}

// overlapAfter is the shortest a round's WAIT is out before the next
// writer may start its own round, and overlapBy the longest (passAfter).
const (
	overlapAfter = 150 * time.Microsecond
	overlapBy    = 10 * time.Millisecond
)

// passAfter is how long a round with a WAIT is out before its writer
// hands the turn on, so that another writer starts the next round while
// this one's WAIT is still out: a round's share of each writer (half a
// round with two, --lock-conns 2, a quarter with four), and at least
// overlapAfter. Against a replica farther away (its WAIT a millisecond or
// more), one connection makes a grant that came just after a round left
// wait for that round and then its own (two rounds for nearly every grant
// once clients' cycles line up: 7.3 ms against 4.1 with a replica 3 ms
// away); with more, a round starts about every passAfter instead. The
// floor (150 µs) is below a round to a replica 1 ms away, whose quarter
// it lets four writers use (4 Redisson threads, replica 1 ms away, four
// writers: 1.28x direct's cycles/s; 0.90x with one writer, 0.95x with two
// and a floor of 1 ms); a round against a replica next door (100-300 µs
// on loopback) mostly ends first, and a writer whose round ended before
// passAfter keeps the turn (writeLoop), so rounds go one after another
// and each carries every write that came while the last was out, as with
// one connection: the fewest WAITs, script calls and fsyncs for each
// grant. Never later than overlapBy:
// rounds that long wait for a replica that stalled (a WAIT out until
// --replica-timeout, or the first rounds while a replica syncs), and the
// writes behind them are sent, to be answered by their own WAIT, rather
// than held.
func (nw *nodeWriter) passAfter() time.Duration {
	share := time.Duration(nw.roundNanos.Load()) / time.Duration(max(nw.ackedWriters.Load(), 1))
	return min(max(share, overlapAfter), overlapBy)
}

// roundDone folds a round's duration into roundNanos.
func (nw *nodeWriter) roundDone(took time.Duration) {
	old := nw.roundNanos.Load()
	if old == 0 {
		nw.roundNanos.Store(int64(took))
		return
	}
	nw.roundNanos.Store(old + (int64(took)-old)/8) // a lost update only ages the average
}

func (nw *nodeWriter) hasScript(sha string) bool { _, ok := nw.scripts.Load(sha); return ok }
func (nw *nodeWriter) addScript(sha string) {
	if !nw.hasScript(sha) { // a Load does not allocate; a Store does
		nw.scripts.Store(sha, struct{}{})
	}
}
func (nw *nodeWriter) forgetScript(sha string) { nw.scripts.Delete(sha) }

// writers returns node's nodeWriter, starting its writers with the node's
// first write.
func (wr *Writer) writers(node *upstream.Node) *nodeWriter {
	if nw, ok := wr.nodes.Load(node); ok {
		return nw.(*nodeWriter)
	}
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if nw, ok := wr.nodes.Load(node); ok {
		return nw.(*nodeWriter)
	}
	nw := newNodeWriter()
	serving := node.ServeLockWrites(func(conn *backend.SyncConn, acked bool) {
		queue, turn := nw.unacked, nw.unackedTurn
		var rounds *nodeWriter // timed only for batches with a WAIT
		if acked {
			queue, turn, rounds = nw.writes, nw.ackedTurn, nw
			nw.ackedWriters.Add(1)
		}
		wr.writeLoop(queue, turn, conn, node.Closed(), rounds)
	})
	if !serving {
		nw.closing.Store(true) // a closed node: its writes are not sent
		return nw
	}
	wr.nodes.Store(node, nw)
	go wr.retire(node, nw)
	return nw
}

// queue hands w to the node's writers, or fails it if the node is closing
// or ctx ends first. Without wait it does not wait for room: it reports
// false, w not queued, if the queue is full.
func (nw *nodeWriter) queue(ctx context.Context, w *Write, wait bool) bool {
	queue := nw.writes
	if !w.wantAcks {
		// Kept apart so they never wait behind another batch's WAIT.
		queue = nw.unacked
	}
	nw.queuing.Add(1)
	defer nw.queuing.Add(-1)
	if nw.closing.Load() {
		w.fail(upstream.ErrUnavailable)
		return true
	}
	if !wait {
		select {
		case queue <- w:
			return true
		default:
			return false
		}
	}
	select {
	case queue <- w:
	case <-ctx.Done():
		w.fail(ctx.Err())
	}
	return true
}

// retire waits for node to close, then answers every write still queued
// for it "unreachable" (none was sent) and forgets the node.
func (wr *Writer) retire(node *upstream.Node, nw *nodeWriter) {
	<-node.Closed()
	nw.closing.Store(true)
	for {
		for _, queue := range []chan *Write{nw.writes, nw.unacked} {
		drain:
			for {
				select {
				case w := <-queue:
					w.fail(upstream.ErrUnavailable)
				default:
					break drain
				}
			}
		}
		// A write that looked at closing before it was set is counted in
		// queuing until it is in a queue: drain again until none is.
		if nw.queuing.Load() == 0 && len(nw.writes) == 0 && len(nw.unacked) == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	wr.nodes.CompareAndDelete(node, nw)
}

// writeLoop sends batches from queue on conn until closed. While one
// batch is out it sends nothing else: until its WAIT is answered (Redis
// would hold anything sent behind the WAIT anyway), or, for writes that
// want no acknowledgements, until its last reply is in. The writes that
// arrive meanwhile form the next batch, and its lock operations one call
// of their batch script: the busier the node, the more grants share one script
// call and one round of acknowledgements. (Sending each release as soon as
// it came, as before, made batches of one: 1.7 operations per script call
// at 50 clients.) It does the batch's I/O itself (sendBatch): nothing else
// would run on a goroutine of the connection's own meanwhile.
//
// The queue's writers (--lock-conns of them) read it in turn: a writer
// takes turn before it reads a batch and, when its round is done, reads
// the next batch itself, so that the next batch is everything that came
// meanwhile, as with one connection. rounds, set for the writers whose
// batches carry a WAIT, times theirs: a round whose WAIT is out longer
// than rounds.passAfter hands the turn on while it is still out, and the
// next writer starts the next round beside it.
func (wr *Writer) writeLoop(queue chan *Write, turn chan struct{}, conn *backend.SyncConn, closed <-chan struct{}, rounds *nodeWriter) {
	if wr.opts.MinReplicas == 0 {
		rounds = nil // no WAIT: nothing to overlap
	}
	batch := make([]*Write, 0, maxWriteBatch)
	var st writerState
	// passed is the number of the last round whose turn was handed on:
	// once, by whichever comes first, the round's end or its timer (a
	// timer that fires late finds a newer number and does nothing).
	var passed atomic.Int64
	pass := func(round int64) {
		if passed.CompareAndSwap(round-1, round) {
			turn <- struct{}{} // never waits: the one token is this writer's
		}
	}
	// kept: the last round ended before its turn was handed on, and this
	// writer reads the next batch too. Rounds that end within passAfter go
	// one after another on one connection, as with --lock-conns 1: handing
	// the turn to another writer at every round's end would only wake
	// another goroutine for each round.
	kept := false
	for round := int64(1); ; round++ {
		if !kept {
			select {
			case <-turn:
			case <-closed:
				return
			}
		}
		select {
		case w := <-queue:
			batch = append(batch, w)
		case <-closed:
			turn <- struct{}{}
			return
		}
	gather:
		for len(batch) < maxWriteBatch {
			select {
			case w := <-queue:
				batch = append(batch, w)
			default:
				break gather
			}
		}
		if rounds == nil {
			wr.sendBatch(conn, batch, &st)
		} else {
			var early *time.Timer // with one writer, nobody to hand the turn to
			if rounds.ackedWriters.Load() > 1 {
				r := round
				early = time.AfterFunc(rounds.passAfter(), func() { pass(r) })
			}
			began := time.Now()
			wr.sendBatch(conn, batch, &st)
			if early != nil {
				early.Stop()
			}
			rounds.roundDone(time.Since(began))
		}
		// The turn is this writer's still unless the timer handed it on.
		kept = passed.CompareAndSwap(round-1, round)
		clear(batch)
		batch = batch[:0]
	}
}

// sendBatch sends the batch and, if any write asks for acknowledgements,
// one WAIT behind them, in one write on conn, and reads their replies on
// the writer's goroutine (backend.SyncConn.Exchange): each write's caller
// has its script's reply as soon as it is read, with the WAIT still out. It
// returns once the last reply (the WAIT's) is in, so that what arrives
// meanwhile goes in one call (see writeLoop). A connection that breaks
// fails every reply not read yet with backend.ErrLost: an unknown outcome.
// The lock operations (ScriptCall.Op) of the batch go as one call of
// their batch script per hash slot (one in all for a backend that does not route by
// key), in the order they came: Redis then parses, looks up and runs one
// script, and replicates one transaction, for many grants, renewals or
// releases. Every other write goes as its own script. st is the calling
// writer's own: its buffer for encoding the batch, and its opsGroups, free
// again once sendBatch returns.
func (wr *Writer) sendBatch(conn *backend.SyncConn, batch []*Write, st *writerState) {
	var ack *ackWait
	for _, w := range batch {
		if w.wantAcks && wr.opts.MinReplicas > 0 {
			// Ready before any script is sent: a caller may ask for the
			// acknowledgements as soon as its script's reply is in.
			ack = &ackWait{}
			ack.thens = ack.inline[:0]
			ack.done.Add(1)
			ack.reply = resp.NewReplyTo(ack)
			break
		}
	}
	groups := wr.groupOps(batch, st)
	req, replies := st.req[:0], st.replies[:0]
	for _, w := range batch {
		if w.wantAcks {
			w.ack = ack
		}
		if w.call.Op != 0 {
			continue // sent with its group, below
		}
		req = appendEval(req, w.call)
		replies = append(replies, w.reply)
	}
	for _, g := range groups {
		req = appendOps(req, g.writes)
		replies = append(replies, g.reply)
	}
	if ack != nil {
		req = append(req, wr.waitRequest...)
		replies = append(replies, ack.reply)
	}
	conn.ExchangeHeld(req, replies, wr.opts.Commits)
	if cap(req) > 1<<20 {
		req = nil // a rare huge batch: not kept for every later one
	}
	clear(replies)
	st.req, st.replies = req[:0], replies[:0]
}

// writerState is one writer's own, reused from batch to batch.
type writerState struct {
	req     []byte        // the batch's requests, encoded
	replies []*resp.Reply // and their replies, in order
	groups  []*opsGroup   // the first used of them are the batch's
	used    int
}

// opsGroup is one call of the batch script: the lock operations of a batch that
// go to one slot, in order. Its reply, the list of theirs, completes each.
// A writer reuses its groups once its batch is done.
type opsGroup struct {
	slot   int
	writes []*Write
	reply  *resp.Reply // completes the group (Complete)
}

// opReplyRoom is the room made for each operation's reply in its group's
// reply buffer.
const opReplyRoom = 128

// groupOps gathers the batch's lock operations into opsGroups, one per
// slot in front of a Redis Cluster (a script's declared keys must all be
// in one slot there; a batch of random resources then makes groups of
// one, pipelined as before), else one. Groups and the operations in each
// keep the batch's order.
func (wr *Writer) groupOps(batch []*Write, st *writerState) []*opsGroup {
	for _, g := range st.groups[:st.used] {
		clear(g.writes)
		g.writes = g.writes[:0]
	}
	st.used = 0
	for _, w := range batch {
		if w.call.Op == 0 {
			continue
		}
		slot := 0
		if wr.routesByKey {
			slot = keys.SlotOf([]byte(w.call.Keys[0]))
		}
		var g *opsGroup
		for _, x := range st.groups[:st.used] {
			if x.slot == slot {
				g = x
				break
			}
		}
		if g == nil {
			if st.used == len(st.groups) {
				g = &opsGroup{}
				g.reply = resp.NewReplyTo(g)
				st.groups = append(st.groups, g)
			}
			g = st.groups[st.used]
			st.used++
			g.slot = slot
		}
		g.writes = append(g.writes, w)
	}
	for _, g := range st.groups[:st.used] {
		// A fresh buffer for each reply: the operations' replies are
		// slices of it, read after the writer has moved on. Made with
		// room for the usual replies, so that reading it in is one
		// allocation, not one per growth (a release's reply, its record,
		// is about 100 bytes).
		g.reply.Buf, g.reply.Err = make([]byte, 0, opReplyRoom*len(g.writes)), nil
	}
	return st.groups[:st.used]
}

// Complete hands each operation its own element of the group's reply (a
// slice of it). A reply that is not a list of one element per operation
// (an error: the script did not run, as with NOSCRIPT or MOVED) is every
// operation's reply; a failure to get one (the connection lost) is every
// operation's failure.
func (g *opsGroup) Complete(r *resp.Reply) {
	rest, n, ok := r.Buf, 0, false
	if r.Err == nil {
		rest, n, ok = resp.ArrayHeader(r.Buf)
		if ok && n != len(g.writes) {
			r.Err = backend.ErrLost // not the batch script's answer: what ran is unknown
		}
	}
	for _, w := range g.writes {
		switch {
		case r.Err != nil:
			w.reply.Err = r.Err
		case ok:
			size, whole := resp.Size(rest)
			if !whole {
				w.reply.Err = backend.ErrLost
				break
			}
			w.reply.Buf, rest = rest[:size:size], rest[size:]
		default:
			w.reply.Buf = r.Buf
		}
		w.reply.Done()
	}
}

// appendOps appends the RESP request that runs ws's operations in one call
// of their batch script (the Source and SHA every one of them carries):
// EVALSHA (EVAL with its source if any of them was told NOSCRIPT), every
// operation's three keys, then for each its letter and its arguments.
func appendOps(b []byte, ws []*Write) []byte {
	nargs := 0
	bySHA := true
	for _, w := range ws {
		nargs += 1 + w.call.Args.Len()
		bySHA = bySHA && w.call.SHA != ""
	}
	b = redcon.AppendArray(b, 3+3*len(ws)+nargs)
	if bySHA {
		b = redcon.AppendBulkString(redcon.AppendBulkString(b, "EVALSHA"), ws[0].call.SHA)
	} else {
		b = redcon.AppendBulkString(redcon.AppendBulkString(b, "EVAL"), ws[0].call.Source)
	}
	var num [20]byte
	b = redcon.AppendBulk(b, strconv.AppendInt(num[:0], int64(3*len(ws)), 10))
	for _, w := range ws {
		b = redcon.AppendBulkString(b, w.call.Keys[0])
		b = redcon.AppendBulkString(b, w.call.Keys[1])
		b = redcon.AppendBulkString(b, w.call.Keys[2])
	}
	for _, w := range ws {
		op := [1]byte{byte(w.call.Op)}
		b = redcon.AppendBulk(b, op[:])
		b = append(b, w.call.Args.enc...)
	}
	return b
}

// appendEval appends the RESP request EVAL source (or EVALSHA sha) numkeys
// key... arg... to b. Encoding straight into the writer's buffer, rather
// than building the arguments first, saves about twenty allocations per
// lock cycle. (Numbers go through a stack buffer: redcon.AppendBulkInt
// would allocate one each.)
func appendEval(b []byte, c ScriptCall) []byte {
	b = redcon.AppendArray(b, 3+len(c.Keys)+c.Args.Len())
	if c.SHA != "" {
		b = redcon.AppendBulkString(redcon.AppendBulkString(b, "EVALSHA"), c.SHA)
	} else {
		b = redcon.AppendBulkString(redcon.AppendBulkString(b, "EVAL"), c.Source)
	}
	var num [20]byte
	b = redcon.AppendBulk(b, strconv.AppendInt(num[:0], int64(len(c.Keys)), 10))
	for _, k := range c.Keys {
		b = redcon.AppendBulkString(b, k)
	}
	return append(b, c.Args.enc...)
}

// ScriptArgs are a script call's arguments, each encoded as a RESP bulk
// string as it is added: the writer copies them into its request as they
// are. The lock path adds them by type (Str, Int, Uint...), so that none is
// boxed into an interface: a []any of them was a third of a lock cycle's
// allocations. The zero value is no arguments.
type ScriptArgs struct {
	n   int
	enc []byte
}

// ArgsOf returns args (strings, []byte, int, int64, uint64, bool, Arg) as
// ScriptArgs, for calls off the lock path.
func ArgsOf(args ...any) ScriptArgs {
	var a ScriptArgs
	return *a.Add(args...)
}

// Len is the number of arguments.
func (a *ScriptArgs) Len() int { return a.n }

// Encoded is the arguments as they go on the wire: one RESP bulk string
// each, one after another.
func (a *ScriptArgs) Encoded() []byte { return a.enc }

// grow readies a's buffer for its first argument: one allocation for a
// lock operation's whole list.
func (a *ScriptArgs) grow() {
	if a.enc == nil {
		a.enc = make([]byte, 0, 256)
	}
}

// Str adds s.
func (a *ScriptArgs) Str(s string) *ScriptArgs {
	a.grow()
	a.n++
	a.enc = redcon.AppendBulkString(a.enc, s)
	return a
}

// Int adds n in decimal. (Through a stack buffer: redcon.AppendBulkInt
// would allocate one.)
func (a *ScriptArgs) Int(n int64) *ScriptArgs {
	var num [20]byte
	return a.Bulk(strconv.AppendInt(num[:0], n, 10))
}

// Uint adds n in decimal.
func (a *ScriptArgs) Uint(n uint64) *ScriptArgs {
	var num [20]byte
	return a.Bulk(strconv.AppendUint(num[:0], n, 10))
}

// Bulk adds b, copied.
func (a *ScriptArgs) Bulk(b []byte) *ScriptArgs {
	a.grow()
	a.n++
	a.enc = redcon.AppendBulk(a.enc, b)
	return a
}

// Bool adds b as "1" or "0".
func (a *ScriptArgs) Bool(b bool) *ScriptArgs {
	if b {
		return a.Str("1")
	}
	return a.Str("0")
}

// Arg is an argument that encodes itself (a lock record's value, whose
// type is its owner's): AppendArg appends it to b as one RESP bulk string.
type Arg interface {
	AppendArg(b []byte) []byte
}

// Add adds each of args by its type (as ArgsOf).
func (a *ScriptArgs) Add(args ...any) *ScriptArgs {
	for _, v := range args {
		switch v := v.(type) {
		case string:
			a.Str(v)
		case []byte:
			a.Bulk(v)
		case int64:
			a.Int(v)
		case int:
			a.Int(int64(v))
		case uint64:
			a.Uint(v)
		case Arg:
			a.grow()
			a.n++
			a.enc = v.AppendArg(a.enc)
		case bool:
			a.Bool(v)
		default:
			panic("lockwriter: unsupported script argument type")
		}
	}
	return a
}
