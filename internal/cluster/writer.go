package cluster

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// ErrOutcomeUnknown means the connection broke while a write was in flight:
// it may or may not have been applied, and its acknowledgements are unknown.
var ErrOutcomeUnknown = errors.New("cluster: connection to Redis lost; write outcome unknown")

// ErrUnavailable means Redis could not be reached; the request was not
// sent. It is the backend's own error: a reply that never left carries it.
var ErrUnavailable = backend.ErrUnavailable

// maxWriteBatch bounds how many lock writes share one WAIT.
const maxWriteBatch = 256

// ScriptCall is one invocation of a Lua script: with EVALSHA if SHA (the
// hex SHA-1 of Source) is set, else with EVAL and the whole source. A caller
// that sets SHA resends with EVAL when Redis answers NOSCRIPT (it restarted
// or ran SCRIPT FLUSH): the script did not run.
type ScriptCall struct {
	Source string
	SHA    string
	Keys   []string
	Args   []any
}

// Write is one lock write in flight. The script's reply (Reply) arrives
// before the replicas' acknowledgements (Acks): the WAIT that counts them
// travels right behind the script in the same pipeline, and Redis answers the
// script as soon as it ran. A caller can do its own slow step, such as an
// fsync, in between.
type Write struct {
	call     ScriptCall
	wantAcks bool

	reply   *resp.Reply
	replied sync.WaitGroup
	ack     *ackWait // nil unless the batch sent a WAIT for this write
	err     error    // set if the write was never sent
}

// ackWait is one WAIT shared by every write of a batch.
type ackWait struct {
	reply *resp.Reply
	done  sync.WaitGroup
}

// Reply waits for the script's reply: nil for a null reply; the error is the
// script's own (a resp.Error), ErrOutcomeUnknown, ErrUnavailable or a
// refused node's error.
func (w *Write) Reply() (any, error) {
	if w.err != nil {
		return nil, w.err
	}
	w.replied.Wait()
	return decode(w.reply)
}

// Raw waits for the script's reply and returns its bytes as Redis wrote
// them, or the error that kept it from Redis (ErrUnavailable: not sent;
// backend.ErrLost: it may have run; a refused node's error).
func (w *Write) Raw() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	w.replied.Wait()
	return w.reply.Buf, w.reply.Err
}

// Acks waits for WAIT: how many replicas acknowledged every write up to this
// one. An error means the count is unknown (treat it as a shortfall whose
// write may or may not stand). Without a WAIT (no acknowledgements asked,
// or --min-replicas 0) it reports 0 at once.
func (w *Write) Acks() (int, error) {
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
		return 0, fmt.Errorf("%w (WAIT: %v)", ErrOutcomeUnknown, err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, ErrOutcomeUnknown
	}
	return int(n), nil
}

// decode turns a reply into a value; a lost connection (or a reply that
// is not RESP) makes the write's outcome unknown.
func decode(r *resp.Reply) (any, error) {
	if r.Err != nil {
		if errors.Is(r.Err, backend.ErrLost) {
			return nil, ErrOutcomeUnknown
		}
		return nil, r.Err
	}
	v, err := resp.Parse(r.Buf)
	if errors.Is(err, resp.ErrBadReply) {
		return nil, ErrOutcomeUnknown
	}
	return v, err
}

// Start queues call to run on the node. If wantAcks, a WAIT for the minimum
// number of replicas follows it on the same connection. Concurrent writes
// are batched: their scripts, then one WAIT for them all, in one write.
func (n *Node) Start(ctx context.Context, call ScriptCall, wantAcks bool) *Write {
	w := &Write{call: call, wantAcks: wantAcks}
	w.replied.Add(1)
	w.reply = resp.NewReply(&w.replied)
	queue := n.writes
	if !wantAcks {
		// Kept apart so they never wait behind another batch's WAIT.
		queue = n.unacked
	}
	select {
	case queue <- w:
	case <-n.done:
		w.err = errors.New("cluster: node closed")
	case <-ctx.Done():
		w.err = ctx.Err()
	}
	return w
}

// ScriptSHA is the name Redis gives a script: the hex SHA-1 of its source,
// for EVALSHA and SCRIPT EXISTS.
func ScriptSHA(source string) string {
	sum := sha1.Sum([]byte(source))
	return hex.EncodeToString(sum[:])
}

// Unsent returns a Write that failed before it was sent, with err.
func Unsent(err error) *Write { return &Write{err: err} }

// Run runs call with no replica wait: for writes whose loss in a failover is
// harmless (a release, an undo: the lease merely runs out).
func (n *Node) Run(ctx context.Context, call ScriptCall) (any, error) {
	return n.Start(ctx, call, false).Reply()
}

// writeLoop sends batches from queue on conn. While one batch's WAIT is out
// it sends nothing else (Redis would hold it behind the WAIT anyway), so the
// writes that arrive meanwhile form the next batch: the busier the node, the
// more grants share one round of acknowledgements.
func (n *Node) writeLoop(queue chan *Write, conn *backend.Conn) {
	defer n.wg.Done()
	batch := make([]*Write, 0, maxWriteBatch)
	var scratch []byte
	for {
		select {
		case w := <-queue:
			batch = append(batch, w)
		case <-n.done:
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
		if ack := n.sendBatch(conn, batch, &scratch); ack != nil {
			ack.done.Wait()
		}
		clear(batch)
		batch = batch[:0]
	}
}

// sendBatch pipelines every script of the batch and, if any asks for
// acknowledgements, one WAIT behind them. It returns that WAIT, if sent.
// scratch is the calling writer's own buffer for encoding requests.
func (n *Node) sendBatch(conn *backend.Conn, batch []*Write, scratch *[]byte) *ackWait {
	var ack *ackWait
	for _, w := range batch {
		if w.wantAcks && n.minReplicas > 0 {
			// Ready before any script is sent: a caller may ask for the
			// acknowledgements as soon as its script's reply is in.
			ack = &ackWait{}
			ack.done.Add(1)
			ack.reply = resp.NewReply(&ack.done)
			break
		}
	}
	for _, w := range batch {
		if w.wantAcks {
			w.ack = ack
		}
		*scratch = appendEval((*scratch)[:0], w.call)
		conn.DoEncoded(*scratch, false, w.reply) // copies the request
	}
	if ack != nil {
		conn.Do([][]byte{
			[]byte("WAIT"),
			strconv.AppendInt(nil, int64(n.minReplicas), 10),
			strconv.AppendInt(nil, max(n.replicaTimeout.Milliseconds(), 1), 10),
		}, ack.reply)
	}
	return ack
}

// appendEval appends the RESP request EVAL source (or EVALSHA sha) numkeys
// key... arg... to b. Encoding straight into the writer's buffer, rather
// than building the arguments first, saves about twenty allocations per
// lock cycle. (Numbers go through a stack buffer: redcon.AppendBulkInt
// would allocate one each.)
func appendEval(b []byte, c ScriptCall) []byte {
	b = redcon.AppendArray(b, 3+len(c.Keys)+len(c.Args))
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
	for _, a := range c.Args {
		switch v := a.(type) {
		case string:
			b = redcon.AppendBulkString(b, v)
		case []byte:
			b = redcon.AppendBulk(b, v)
		case int64:
			b = redcon.AppendBulk(b, strconv.AppendInt(num[:0], v, 10))
		case int:
			b = redcon.AppendBulk(b, strconv.AppendInt(num[:0], int64(v), 10))
		case uint64:
			b = redcon.AppendBulk(b, strconv.AppendUint(num[:0], v, 10))
		case bool:
			if v {
				b = redcon.AppendBulkString(b, "1")
			} else {
				b = redcon.AppendBulkString(b, "0")
			}
		default:
			panic("cluster: unsupported script argument type")
		}
	}
	return b
}
