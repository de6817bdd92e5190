package lockcmd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Bounds on lock-family arguments. They keep owner records small and Redis
// keys sane; every one is stated in docs/lock-family.md.
const (
	MaxResourceLen = locks.MaxResourceLen // bytes
	MaxOwnerLen    = 256                  // bytes
	MaxTTL         = 30 * 24 * time.Hour  // longest lease
	MaxWait        = 10 * time.Minute     // longest LOCK.ACQUIRE ... WAIT
)

// lockArgs are a lock request's validated arguments, copied out of the
// connection's buffer so they outlive the request.
type lockArgs struct {
	resource, owner string
	ttl, wait       time.Duration
}

func parseResource(b []byte) (string, string) {
	if msg := resourceError(b); msg != "" {
		return "", msg
	}
	return string(b), ""
}

// resourceError is why b is no resource ("" if it is one).
func resourceError(b []byte) string {
	if len(b) == 0 || len(b) > MaxResourceLen {
		return fmt.Sprintf("ERR resource must be 1 to %d bytes", MaxResourceLen)
	}
	return ""
}

func parseOwner(b []byte) (string, string) {
	if msg := ownerError(b); msg != "" {
		return "", msg
	}
	return string(b), ""
}

// ownerError is why b is no owner ("" if it is one).
func ownerError(b []byte) string {
	if len(b) == 0 || len(b) > MaxOwnerLen {
		return fmt.Sprintf("ERR owner must be 1 to %d bytes", MaxOwnerLen)
	}
	return ""
}

func parseMillis(b []byte, what string, lo int64, hi time.Duration) (time.Duration, string) {
	n, ok := resp.ParseInt(b)
	if !ok || n < lo || n > hi.Milliseconds() {
		return 0, fmt.Sprintf("ERR %s must be an integer from %d to %d (milliseconds)", what, lo, hi.Milliseconds())
	}
	return time.Duration(n) * time.Millisecond, ""
}

// parseLock validates resource [owner [ttl-ms]] in order and stops at the
// first bad one.
func parseLock(args [][]byte) (a lockArgs, msg string) {
	if len(args) < 3 {
		a.resource, msg = parseResource(args[1])
		return
	}
	if msg = resourceError(args[1]); msg != "" {
		return
	}
	if msg = ownerError(args[2]); msg != "" {
		return
	}
	// Both copied out of the connection's buffer in one allocation.
	both := string(args[1]) + string(args[2])
	a.resource, a.owner = both[:len(args[1])], both[len(args[1]):]
	if len(args) < 4 {
		return
	}
	a.ttl, msg = parseMillis(args[3], "ttl-ms", 1, MaxTTL)
	return
}

// ttlTooShort is the error for a ttl no grant or renewal could ever be
// replied with (locks.Manager.Grantable), or "". Such a request used to be
// granted, undone and answered -TRYAGAIN ... retry, which no retry could
// change; a ttl that can be granted keeps -TRYAGAIN for a reply that was
// late this time.
func (fam *Family) ttlTooShort(ttl time.Duration) string {
	if fam.opts.Manager.Grantable(ttl) {
		return ""
	}
	return fmt.Sprintf("ERR fenceproxy: ttl-ms %d is too short to ever be granted: a reply must leave Redlock's drift allowance (1%% + 2 ms) and --lease-safety-margin of the lease, so the shortest ttl that can be granted is %d ms; use a ttl well above the time a grant takes (a Redis round trip and the replicas' WAIT), seconds for most work",
		ttl.Milliseconds(), fam.opts.Manager.MinTTL().Milliseconds())
}

// runLock serves a lock request off the connection's goroutine, after the
// connection's earlier requests for resource (locks.Runner: the lock path's
// concurrency policy); fn's reply, or its error, completes p. timeout is how
// long the request may wait for the lock.
func (fam *Family) runLock(c Conn, resource string, p *resp.Reply, timeout time.Duration, fn func(ctx context.Context) ([]byte, error)) {
	fam.runLockTo(c, resource, p, timeout, func(ctx context.Context, dst []byte) ([]byte, error) {
		reply, err := fn(ctx)
		return append(dst, reply...), err
	})
}

// runNow runs a lock request whose steps run as callbacks where each
// completes (locks/now.go), if start can start it: start gets the
// request's context and its nowReply, which the last step answers through.
// It reports false, having done nothing, when start cannot, or when an
// earlier request of the connection for resource is still in flight (this
// one then queues behind it: runLock).
func (fam *Family) runNow(c Conn, resource string, p *resp.Reply, start func(ctx context.Context, r *nowReply) bool) bool {
	reqs := &c.State().Requests
	if !reqs.StartNow(resource) {
		return false
	}
	r := &nowReply{fam: fam, p: p, reqs: reqs, resource: resource, start: time.Now()}
	if !start(reqs.Context(), r) {
		reqs.Finished(resource)
		return false
	}
	fam.byCallbacks.Inc()
	return true
}

// nowReply answers a lock request that runNow started, once its last step
// is done: it is the request's callback (locks.AcquireDone, ReleaseDone),
// one allocation for all of it.
type nowReply struct {
	fam      *Family
	p        *resp.Reply
	reqs     *locks.ConnRequests
	resource string
	start    time.Time
	acquire  acquireRequest // a LOCK.ACQUIRE's
	renew    renewReply     // a LOCK.RENEW's
}

// Acquired answers a LOCK.ACQUIRE.
func (r *nowReply) Acquired(g locks.Grant, err error) {
	r.fam.opts.Metrics.AcquireSeconds.Observe(time.Since(r.start).Seconds())
	r.p.Buf, r.p.Err = r.acquire.reply(r.p.Buf, g, err)
	r.done()
}

// Renewed answers a LOCK.RENEW.
func (r *nowReply) Renewed(token uint64, err error) {
	r.answer(r.renew.reply(token, err))
}

// Released answers a LOCK.RELEASE.
func (r *nowReply) Released(released bool, err error) {
	r.p.Buf, r.p.Err = r.fam.releaseReply(r.p.Buf, released, err)
	r.done()
}

// answer answers with reply (a recipe's, made by its caller).
func (r *nowReply) answer(reply []byte, err error) {
	r.p.Buf, r.p.Err = append(r.p.Buf, reply...), err
	r.done()
}

// done ends the connection's request and completes the reply: in that
// order, as a client told may send its next request for the resource at
// once, which must not find this one running (it would queue behind it).
func (r *nowReply) done() {
	r.reqs.Finished(r.resource)
	r.p.Done()
}

// runLockTo is runLock for an fn that appends its reply to dst (p's
// buffer) itself: LOCK.ACQUIRE's and LOCK.RELEASE's, which then cost
// neither a closure around fn nor a buffer of their own.
func (fam *Family) runLockTo(c Conn, resource string, p *resp.Reply, timeout time.Duration, fn func(ctx context.Context, dst []byte) ([]byte, error)) {
	fam.onWorkers.Inc()
	fam.runner.Reply(&c.State().Requests, resource, timeout, p, fn)
}

// The replies to a grant or renewal that could not be answered while
// enough of its lease was left (locks.ErrLate). A late renewal's re-arm
// cannot be undone, so its holder is told how to count its lease.
const (
	replyLateGrant   = "-TRYAGAIN fenceproxy: the lock could not be granted with enough of its lease left; nothing was granted (a lease this owner already held stands as it was), retry\r\n"
	replyLateRenewal = "-TRYAGAIN fenceproxy: the renewal could not be confirmed with enough of its lease left; count the lease as ending at the earlier of its previous end and ttl-ms from this request, and retry\r\n"
	// A tier follower got the leader's grant too late (the link to the
	// leader was slow): undone on the leader, or, when that could not be
	// done (a re-arm, a link that failed again), the lease runs out by
	// itself.
	replyLateRelayedGrant       = "-TRYAGAIN fenceproxy: the tier's leader granted the lock, but its reply reached this node too late to leave enough of the lease; count the lock as not held (the lease runs out by itself) and retry with the same owner (it gets the same token)\r\n"
	replyLateRelayedGrantUndone = "-TRYAGAIN fenceproxy: the tier's leader granted the lock, but its reply reached this node too late to leave enough of the lease; the grant was undone, nothing is held, retry\r\n"
)

// receivedAt is when the request being served reached this host (read
// from the client, or earlier by the kernel's count: protocol's
// ArrivedAt): a lease is counted from it. (A connection that never read,
// as in unit tests, counts from now.) A command relayed by a tier follower
// counts from when the follower received it (TIER.RELAY's elapsed time).
func receivedAt(c Conn) time.Time {
	t := c.ArrivedAt()
	if t.IsZero() {
		t = time.Now()
	}
	if tp := c.State().Peer; tp != nil {
		t = t.Add(-tp.Elapsed)
	}
	return t
}

// LeaseOnLoop reports whether the serve loop may serve a LOCK.ACQUIRE,
// LOCK.RENEW or LOCK.RELEASE: their serving only parses the request and
// starts it as callbacks (runNow) or hands it to a lock worker
// (runLockTo), whose reply completes the client's batch, so the loop's
// client stays on the loop through its lock cycles. A LOCK.ACQUIRE ...
// WAIT too: it ends its batch (MayBlock) and the loop watches the client
// meanwhile, whose going away (ClientGone) takes it out of the line; its
// worker is one of the unbounded waiters', which never makes the hand-over
// wait. Not on a tier node (see below), and not while the bounded
// workers' backlog is filling (handing a request over would wait for
// room: the client's goroutine may, the loop must not).
func (fam *Family) LeaseOnLoop(args [][]byte) bool {
	return fam.On() && !fam.InTier() && !fam.runner.Crowded()
}

// Why a tier node's lock requests still take a goroutine detour (issue 24,
// tried 2026-12-07 and reverted): nothing of their serving waits (a
// follower's relay and a leader's grants run on lock workers), and served
// on the loop a tier's lock cycles measured 1.7-2.4x faster
// (docs/performance.md), but the fault suite then caught a Redisson
// renewal on the leader replied after its lease was over (TestFaultTier,
// seed 531400, under CI's load): it left 1.3 ms after the stopped leader
// resumed, so it had been judged in time before the stop (a later judge
// refuses it) and its reply was held meanwhile, most likely by the loop,
// which writes a batch whose last reply came in while the loop still held
// it only once it lets go. A single node's loop-served lock requests have
// the same window, never caught there; until the loop lets the completer
// of such a reply write it itself, a tier node (whose leader the fault
// suite stops with requests in flight) keeps the detour, whose goroutine
// lets go of the batch as it dispatches (protocol's goroutinedetour.go).

func (fam *Family) Acquire(c Conn, args [][]byte, p *resp.Reply) {
	if len(args) != 4 && len(args) != 6 {
		p.DoneError("ERR wrong number of arguments for 'lock.acquire' command")
		return
	}
	a, msg := parseLock(args)
	if msg == "" && len(args) == 6 {
		if !strings.EqualFold(string(args[4]), "wait") {
			msg = "ERR syntax error: expected WAIT timeout-ms after ttl-ms"
		} else {
			a.wait, msg = parseMillis(args[5], "WAIT timeout-ms", 0, MaxWait)
		}
	}
	if msg == "" {
		msg = fam.ttlTooShort(a.ttl)
	}
	if msg != "" {
		fam.opts.Metrics.Acquires.WithLabelValues("invalid").Inc()
		p.DoneError(msg)
		return
	}
	if a.wait > 0 {
		c.MayBlock() // a client that leaves stops waiting and leaves the line
	}
	a.owner = fam.lockOwner(c, a.owner)
	r := acquireRequest{fam: fam, null: nullReply(c), received: receivedAt(c), forFollower: relaysGrantTimes(c)}
	addr := c.RemoteAddr
	if a.wait == 0 && fam.runNow(c, a.resource, p, func(ctx context.Context, now *nowReply) bool {
		now.acquire = r
		return fam.opts.Manager.AcquireNow(ctx, a.resource, a.owner, addr, a.ttl, r.received, now)
	}) {
		return
	}
	start := time.Now()
	fam.runLockTo(c, a.resource, p, a.wait, func(ctx context.Context, dst []byte) ([]byte, error) {
		g, err := fam.opts.Manager.AcquireGrant(ctx, a.resource, a.owner, addr, a.ttl, a.wait, r.received)
		fam.opts.Metrics.AcquireSeconds.Observe(time.Since(start).Seconds())
		return r.reply(dst, g, err)
	})
}

// acquireRequest is what LOCK.ACQUIRE's reply needs of its request.
type acquireRequest struct {
	fam         *Family
	null        []byte    // the connection's null reply
	received    time.Time // when it was read
	forFollower bool      // relayed by a tier follower, which is told the grant's times
}

// reply appends the reply to the acquire's outcome (g, err) to dst.
func (r *acquireRequest) reply(dst []byte, g locks.Grant, err error) ([]byte, error) {
	fam := r.fam
	switch {
	case err == nil && r.forFollower:
		fam.granted.Inc()
		return appendRelayedGrant(dst, g, r.received), nil
	case err == nil:
		fam.granted.Inc()
		return redcon.AppendInt(dst, int64(g.Token)), nil
	case err == locks.ErrBusy:
		fam.busy.Inc()
		return append(dst, r.null...), nil
	}
	var qf *locks.QueueFullError
	if errors.As(err, &qf) {
		fam.opts.Metrics.Acquires.WithLabelValues("queuefull").Inc()
		return append(dst, queueFullReply(qf)...), nil
	}
	if nr := noReplicas(err); nr != nil {
		fam.opts.Metrics.Acquires.WithLabelValues("noreplicas").Inc()
		return redcon.AppendError(dst, fmt.Sprintf(
			"NOREPLICAS %d of %d required replicas acknowledged the lock in time; nothing was granted", nr.Acked, nr.Wanted)), nil
	}
	if reply, ok := evictableReply(err, "nothing was granted"); ok {
		fam.opts.Metrics.Acquires.WithLabelValues("evictable").Inc()
		return append(dst, reply...), nil
	}
	if err == locks.ErrLate {
		fam.opts.Metrics.Acquires.WithLabelValues("late").Inc()
		return append(dst, replyLateGrant...), nil
	}
	fam.opts.Metrics.Acquires.WithLabelValues("error").Inc()
	return dst, fam.lockError(err, "the lock may or may not be granted: retry with the same owner")
}

func (fam *Family) Renew(c Conn, args [][]byte, p *resp.Reply) {
	a, msg := parseLock(args)
	if msg == "" {
		msg = fam.ttlTooShort(a.ttl)
	}
	if msg != "" {
		fam.opts.Metrics.Renewals.WithLabelValues("invalid").Inc()
		p.DoneError(msg)
		return
	}
	a.owner = fam.lockOwner(c, a.owner)
	received := receivedAt(c)
	r := renewReply{fam: fam, null: nullReply(c)}
	if fam.runNow(c, a.resource, p, func(_ context.Context, now *nowReply) bool {
		now.renew = r
		return fam.opts.Manager.RenewNow(a.resource, a.owner, a.ttl, received, now)
	}) {
		return
	}
	fam.runLock(c, a.resource, p, 0, func(ctx context.Context) ([]byte, error) {
		return r.reply(fam.opts.Manager.Renew(ctx, a.resource, a.owner, a.ttl, received))
	})
}

// renewReply makes a LOCK.RENEW's reply, and counts it.
type renewReply struct {
	fam  *Family
	null []byte // the client's null: the lease is not held
}

func (r renewReply) reply(token uint64, err error) ([]byte, error) {
	fam := r.fam
	switch {
	case err == nil:
		fam.renewed.Inc()
		return redcon.AppendInt(nil, int64(token)), nil
	case err == locks.ErrNotHeld:
		fam.opts.Metrics.Renewals.WithLabelValues("lost").Inc()
		return r.null, nil
	}
	if nr := noReplicas(err); nr != nil {
		fam.opts.Metrics.Renewals.WithLabelValues("noreplicas").Inc()
		return redcon.AppendError(nil, fmt.Sprintf(
			"NOREPLICAS %d of %d required replicas acknowledged the renewal in time; the lease may be extended on the master only", nr.Acked, nr.Wanted)), nil
	}
	if reply, ok := evictableReply(err, "the lease was not extended"); ok {
		fam.opts.Metrics.Renewals.WithLabelValues("evictable").Inc()
		return reply, nil
	}
	if err == locks.ErrLate {
		fam.opts.Metrics.Renewals.WithLabelValues("late").Inc()
		return []byte(replyLateRenewal), nil
	}
	fam.opts.Metrics.Renewals.WithLabelValues("error").Inc()
	return nil, fam.lockError(err, "the lease may or may not be extended: retry")
}

func (fam *Family) Release(c Conn, args [][]byte, p *resp.Reply) {
	a, msg := parseLock(args)
	if msg != "" {
		fam.opts.Metrics.Releases.WithLabelValues("invalid").Inc()
		p.DoneError(msg)
		return
	}
	a.owner = fam.lockOwner(c, a.owner)
	if fam.runNow(c, a.resource, p, func(_ context.Context, now *nowReply) bool {
		return fam.opts.Manager.ReleaseNow(a.resource, a.owner, now)
	}) {
		return
	}
	fam.runLockTo(c, a.resource, p, 0, func(ctx context.Context, dst []byte) ([]byte, error) {
		released, err := fam.opts.Manager.Release(ctx, a.resource, a.owner)
		return fam.releaseReply(dst, released, err)
	})
}

// releaseReply appends the reply to a release's outcome to dst.
func (fam *Family) releaseReply(dst []byte, released bool, err error) ([]byte, error) {
	switch {
	case err != nil:
		fam.opts.Metrics.Releases.WithLabelValues("error").Inc()
		return dst, fam.lockError(err, "the lock may or may not be released: retry")
	case released:
		fam.released.Inc()
		return append(dst, ":1\r\n"...), nil
	default:
		fam.notHeld.Inc()
		return append(dst, ":0\r\n"...), nil
	}
}

func (fam *Family) FenceCheck(c Conn, args [][]byte, p *resp.Reply) {
	resource, msg := parseResource(args[1])
	token, ok := resp.ParseInt(args[2])
	if msg == "" && (!ok || token <= 0) {
		msg = "ERR token must be a positive integer"
	}
	if msg != "" {
		fam.opts.Metrics.FenceChecks.WithLabelValues("invalid").Inc()
		p.DoneError(msg)
		return
	}
	// Answered where it is served (the serve loop) when nothing needs a
	// wait: no earlier request of this client for the resource is still
	// running (say, a pipelined ACQUIRE: checked after it, not before),
	// the heartbeat round is on time, and the resource's newest token is
	// in the store's cache. Else a lock worker answers it.
	if !c.State().Requests.Busy(resource) {
		if current, known, err := fam.opts.Manager.FenceCheckNow(resource, uint64(token)); known {
			reply, err := fam.fenceVerdict(token, current, err)
			p.Buf, p.Err = append(p.Buf, reply...), err
			p.Done()
			return
		}
	}
	fam.runLock(c, resource, p, 0, func(ctx context.Context) ([]byte, error) {
		if err := fam.opts.Manager.AdmitWithin(ctx); err != nil {
			fam.opts.Metrics.FenceChecks.WithLabelValues("error").Inc()
			return nil, fam.lockError(err, "retry")
		}
		current, err := fam.opts.Manager.FenceCheck(resource, uint64(token))
		return fam.fenceVerdict(token, current, err)
	})
}

// fenceVerdict is FENCE.CHECK's reply to the Manager's verdict, counted.
func (fam *Family) fenceVerdict(token int64, current bool, err error) ([]byte, error) {
	switch {
	case err == locks.ErrNeverIssued:
		// The caller's mistake, not a failure of the proxy: kept apart
		// from "error" so that dashboards of backend errors stay quiet.
		fam.opts.Metrics.FenceChecks.WithLabelValues("invalid").Inc()
		return redcon.AppendError(nil, "ERR token "+strconv.FormatInt(token, 10)+" was never issued for this resource"), nil
	case err != nil:
		fam.opts.Metrics.FenceChecks.WithLabelValues("error").Inc()
		return nil, fam.lockError(err, "retry")
	case current:
		fam.current.Inc()
		return []byte(":1\r\n"), nil
	default:
		fam.opts.Metrics.FenceChecks.WithLabelValues("stale").Inc()
		return []byte(":0\r\n"), nil
	}
}

func (fam *Family) LockInfo(c Conn, args [][]byte, p *resp.Reply) {
	resource, msg := parseResource(args[1])
	if msg != "" {
		p.DoneError(msg)
		return
	}
	null := nullReply(c)
	prefix := fam.holderPrefix(c)
	fam.runLock(c, resource, p, 0, func(ctx context.Context) ([]byte, error) {
		info, err := fam.opts.Manager.Info(ctx, resource)
		if err != nil {
			return nil, fam.lockError(err, "retry")
		}
		b := redcon.AppendArray(nil, 14)
		b = redcon.AppendBulkString(b, "owner")
		if info.Held {
			b = redcon.AppendBulkString(b, visibleOwner(prefix, info.Owner))
		} else {
			b = append(b, null...)
		}
		b = redcon.AppendBulkString(b, "token")
		b = redcon.AppendInt(b, int64(info.Token))
		b = redcon.AppendBulkString(b, "ttl-ms")
		if info.Held {
			b = redcon.AppendInt(b, info.LeaseLeft.Milliseconds())
		} else {
			b = redcon.AppendInt(b, -2)
		}
		b = redcon.AppendBulkString(b, "waiters")
		b = redcon.AppendInt(b, int64(info.Waiters))
		return appendLockInfoMore(b, info, null), nil
	})
}

// lockError turns a lock-manager failure into the error value the client
// is answered with (its reply is written by protocol), saying what the
// client can do, and logs the detail the client does not get.
//
// The errors a client may see carry their own reply (resp.CodedError:
// the fence store's, the token authority's, a foreign owner record's, a
// refused node's, Redis's refusal of a script), so this needs to know no
// package's error values; where the reply is written (protocol), one whose
// reply sends the client to the log (resp.LoggedError) is logged. An error
// that is AuthorityUnconfirmed is answered with the backend's refusal while
// there is one (it is why the authority is late).
func (fam *Family) lockError(err error, unknownOutcome string) error {
	var re redis.Error
	var coded resp.CodedError
	var late authorityUnconfirmed
	switch {
	case errors.As(err, &late):
		if r := fam.opts.Backend.Refusal(); r != nil {
			// The heartbeat is late because the master refuses it: say why.
			return r
		}
	case errors.Is(err, upstream.ErrUnavailable):
		return upstream.ErrUnavailable
	case errors.Is(err, upstream.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded):
		return resp.Error{Code: "ERR", Msg: "fenceproxy: lost contact with Redis; " + unknownOutcome}
	}
	switch {
	case errors.As(err, &coded):
		var logged resp.LoggedError
		if errors.As(err, &logged) {
			return err // with its cause, for the log
		}
		return coded
	case errors.As(err, &re):
		// Redis refused a lock read, which goes through go-redis.
		return resp.NewError(re.Error())
	}
	fam.opts.Logger.Error("lock command failed", "err", err)
	return resp.Error{Code: "ERR", Msg: "fenceproxy: internal error serving the lock command (see the proxy's log)"}
}

// authorityUnconfirmed is an error of a token authority not confirmed on
// the backend right now (the authority's heartbeat is late, or the fence
// store's bound is not yet shared).
type authorityUnconfirmed interface{ AuthorityUnconfirmed() }

// FenceExec is FENCE.EXEC resource token command [arg ...]: the command runs
// only if token is the newest issued for resource (see Manager.FencedExec).
func (fam *Family) FenceExec(c Conn, args [][]byte, p *resp.Reply) {
	resource, msg := parseResource(args[1])
	token, ok := resp.ParseInt(args[2])
	if msg == "" && (!ok || token <= 0) {
		msg = "ERR token must be a positive integer"
	}
	if msg != "" {
		p.DoneError(msg)
		return
	}
	command := make([][]byte, len(args)-3)
	for i, a := range args[3:] {
		command[i] = append([]byte(nil), a...) // outlives the request buffer
	}
	var keyAt []int // nil: the Manager takes command[1]
	if fam.opts.Keys != nil {
		keyAt = fam.opts.Keys.LookupBytes(command[0]).Keys([]int{}, command)
	}
	prefix := fam.holderPrefix(c)
	fam.runLock(c, resource, p, 0, func(ctx context.Context) ([]byte, error) {
		reply, err := fam.opts.Manager.FencedExecAs(ctx, resource, uint64(token), command, keyAt, prefix)
		switch {
		case err == nil:
			return reply, nil
		case err == locks.ErrOtherHolder:
			return redcon.AppendError(nil, "NOPERM fenceproxy: this resource's lock is held by another user; the command was not run"), nil
		case err == locks.ErrLeaseOver:
			return redcon.AppendError(nil, "ERR fenceproxy: token "+strconv.FormatInt(token, 10)+" has no current lease; with authentication on, FENCE.EXEC runs only while the caller's user holds the lock; the command was not run"), nil
		case err == locks.ErrStale:
			fam.opts.Metrics.FenceChecks.WithLabelValues("stale").Inc()
			return redcon.AppendError(nil, "STALE token "+strconv.FormatInt(token, 10)+" is older than the newest issued for this resource; the command was not run"), nil
		case err == locks.ErrNeverIssued:
			return redcon.AppendError(nil, "ERR token "+strconv.FormatInt(token, 10)+" was never issued for this resource"), nil
		}
		return nil, fam.lockError(err, "the command may or may not have run")
	})
}

// Top is LOCK.TOP [count]: the most contended resources, most first, as
// [resource, contended-acquires, waiting-now] triples (default 10).
func (fam *Family) Top(c Conn, args [][]byte, p *resp.Reply) {
	n := int64(10)
	if len(args) > 2 {
		p.DoneError("ERR wrong number of arguments for 'lock.top' command")
		return
	}
	if len(args) == 2 {
		var ok bool
		if n, ok = resp.ParseInt(args[1]); !ok || n < 1 || n > 1024 {
			p.DoneError("ERR count must be an integer from 1 to 1024")
			return
		}
	}
	var top []locks.Contended
	var waiters []int
	if fam.opts.Auth {
		top, waiters = fam.visibleTop(c, int(n))
	} else {
		top, waiters = fam.opts.Manager.Top(int(n))
	}
	b := redcon.AppendArray(p.Buf, len(top))
	for i, t := range top {
		b = redcon.AppendArray(b, 3)
		b = redcon.AppendBulkString(b, t.Resource)
		b = redcon.AppendInt(b, int64(t.Count))
		b = redcon.AppendInt(b, int64(waiters[i]))
	}
	p.Buf = b
	p.Done()
}
