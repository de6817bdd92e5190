package tier

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
)

// proposer puts the leader's Reserve, Confirm and Cancel ops into few log
// entries: while depth entries it proposed are in flight (handed to raft,
// not yet committed and applied), ops queue, and the next entry (a Batch)
// carries every op queued by the time one of them ends. Under load an entry
// carries the ops of many grants of many clients; idle, an op goes at once
// in an entry of its own.
//
// Raft already writes every entry waiting when its leader loop writes the
// log (BatchApplyCh: one fsync for them all); what the Batch saves is the
// work per entry, on every node: a future and two channel hand-offs on
// the leader, a log record in each Pebble, an entry encoded for each
// follower and decoded by it, an FSM call; and, since the entries in
// flight are bounded, log writes (fsyncs) per second.
//
// A Reserve waits for its entry's commit (invariant 1); a Confirm or a
// Cancel is not awaited and rides in the next entry (its loss is safe:
// invariant 3 folds the reservation as issued).
type proposer struct {
	n     *Node
	depth int

	// mu is held while an entry is taken from the queue and handed to
	// raft, so entries reach the log in the order their ops queued.
	mu       sync.Mutex
	queue    []proposal
	inflight int

	entries, ops atomic.Uint64 // Batch entries proposed and the ops they carried
}

// proposal is one queued op, made during the leadership numbered epoch.
type proposal struct {
	op    entry
	epoch uint64
	done  chan error // a Reserve's outcome; nil for Confirm and Cancel
}

// proposeDepth is how many Batch entries may be in flight at once. One
// measured best (scripts/bench.sh --tier; docs/performance.md): two kept
// the leader's and the followers' fsyncs overlapping, but made smaller
// entries and more log writes, which cost more CPU than the overlap won.
const proposeDepth = 1

// submit queues op, and proposes the queue now if fewer than depth entries
// are in flight.
func (p *proposer) submit(op proposal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, op)
	p.proposeLocked()
}

// maxBatchBytes bounds one Batch entry's encoding. Every node keeps its
// newest logCacheEntries entries whole in memory (raft.LogCache), so the
// Batches' size is memory on every node: without a bound, maxBatchOps ops
// of resources of tokenstate.MaxResourceLen bytes would make a Batch of 2 MiB.
// Under load a Batch is a few hundred ops of short names, far below it.
const maxBatchBytes = 64 << 10

// opBytes is what op (a Reserve, Confirm or Cancel) adds to a Batch's
// encoding (entry.appendTo): its kind byte, the resource and its length,
// the token, and a Reserve's term.
func opBytes(op *entry) int {
	n := 1 + uvarintLen(uint64(len(op.resource))) + len(op.resource) + uvarintLen(op.token)
	if op.kind == kindReserve {
		n += uvarintLen(op.term)
	}
	return n
}

func uvarintLen(v uint64) int { return max(1, (bits.Len64(v)+6)/7) }

// batchLen is how many ops from the front of queue the next Batch takes:
// as many as fit in maxBatchOps and maxBatchBytes, and at least one.
func batchLen(queue []proposal) int {
	size := 2 + binary.MaxVarintLen16 // version, kind and the count
	for k := range queue {
		size += opBytes(&queue[k].op)
		if k == maxBatchOps || k > 0 && size > maxBatchBytes {
			return k
		}
	}
	return len(queue)
}

// proposeLocked hands the front of the queue (batchLen of it) to raft as
// one Batch entry, if fewer than depth are in flight. Ops queued during an
// earlier leadership are dropped (a Reserve among them fails: leadership
// was lost).
func (p *proposer) proposeLocked() {
	for p.inflight < p.depth && len(p.queue) > 0 {
		k := batchLen(p.queue)
		batch := p.queue[:k:k]
		if k == len(p.queue) {
			p.queue = nil
		} else {
			p.queue = append([]proposal(nil), p.queue[k:]...)
		}
		n := p.n
		n.mu.Lock()
		epoch, ready := n.epoch, n.ready
		n.mu.Unlock()
		e := entry{kind: kindBatch, ops: make([]entry, 0, len(batch))}
		live := batch[:0]
		for _, b := range batch {
			if !ready || b.epoch != epoch {
				if b.done != nil {
					b.done <- &UnavailableError{Lost: true}
				}
				continue
			}
			e.ops = append(e.ops, b.op)
			live = append(live, b)
		}
		if len(live) == 0 {
			continue
		}
		p.inflight++
		p.entries.Add(1)
		p.ops.Add(uint64(len(live)))
		f := n.raft.Apply(e.encode(), applyTimeout)
		go p.await(f, live)
	}
}

// await tells the entry's Reserves its outcome once raft has it, then
// proposes what queued meanwhile.
func (p *proposer) await(f interface {
	Error() error
	Response() any
}, batch []proposal) {
	err := f.Error()
	if err == nil {
		if rerr, ok := f.Response().(error); ok {
			err = rerr
		}
	} else {
		err = p.n.fromRaft(err)
	}
	for _, b := range batch {
		if b.done != nil {
			b.done <- err
		}
	}
	p.mu.Lock()
	p.inflight--
	p.proposeLocked()
	p.mu.Unlock()
}
