// Package protocol is fenceproxy's client side: it accepts RESP connections,
// parses requests within Redis's limits, hands each to a Handler, and writes
// the replies back in request order. docs/design/protocol.md has the long
// form: why an event loop, why not redcon's server loop, and each rule's
// reasons.
//
// A connection is served by one of two transports, for its whole life:
//
//   - On a goroutine of its own (serve; with --serve-loop=false, where
//     the event loop does not run, and for a Handler that is not a
//     LoopHandler): read every request the client has
//     already sent, start each one (a Handler may answer at once or later
//     from another goroutine, e.g. when the backend replies), then write the
//     whole batch with a single system call. A pipeline of N requests has N
//     requests in flight; its replies still leave in order. A batch that
//     ends because the client sent nothing more is written by whoever
//     completes its last reply (later.go).
//   - On the event loop (Server.Loop, a netloop.Loop, with a LoopHandler;
//     loop.go): a client starts there (the loop accepts plaintext clients
//     itself and reads a new client at once: loopaccept.go; a TLS client
//     comes once its handshake is done, through the same tls.Conn:
//     tlsloop.go). When its socket is ready,
//     the loop reads what it sent, frames it (Reader.Frame, the one
//     parser both ways of serving use: a request longer than the read
//     buffer grows it, and a malformed one is answered and closed there,
//     as on a goroutine), dispatches each whole request, ends the
//     batch when the client has sent nothing more (or at a full batch, or
//     64 requests), and goes on to the next ready client; the batch is
//     written where its last reply completes it, on the loop itself when
//     the backend's connections are served by the same loop. A request
//     that may block (MayBlock: first in its batch, on a backend
//     connection of its own that is open already, as the Handler decides)
//     is served there too and ends its batch; a request that must follow
//     its earlier replies (AfterReplies) takes a detour: the connection
//     dispatches nothing more until they are in, then the loop runs the
//     rest of the request and goes on (detour.go); a request that needs
//     a wait first (a dial, a round trip on a connection of its own:
//     OffLoop) has it done on a goroutine and goes on the same way once
//     it is done (pending.go); while a blocked batch waits the loop
//     watches the client, and one that hangs up, is killed or outlasts
//     Shutdown gets the Handler's ClientGone (clientGone). A batch the
//     socket does not take at once stays on the loop too: the loop writes
//     its rest as the socket makes room, under the same limits as a
//     goroutine's write (loopwrite.go), and so do a subscribed client's
//     stream and a client's pushes (TakeWrites, EnablePushes: the loop
//     writes the client's outbox between its batches, under the pubsub
//     limits, loopoutbox.go; a Handler dials what it needs for them off
//     the loop, OffLoop). A request the Handler does not serve
//     on the loop's thread without blocking (LoopHandler.ServesOnLoop
//     false: in fenceproxy, CLIENT TRACKING, AUTH as another Redis user,
//     the proxy's own INFO or CLIENT LIST, a tier peer's link...) takes a
//     goroutine detour: the client stays on the loop, frozen as in a
//     detour, a goroutine runs ServeCommand for it (where AfterReplies
//     and OffLoop wait, as on the goroutine transport), and the
//     loop goes on with the client once it has returned
//     (goroutinedetour.go). A fence keeps what other clients send after
//     such a request, when it goes first in its batch, from being
//     dispatched before it (for at most fenceWait), without the loop's
//     thread waiting.
//
// # When a batch is written
//
// Every complete request is answered without waiting for more bytes from
// the client; requests that arrive together share one write. A batch is
// written (all of it, in request order) as soon as: the client has sent
// nothing more; what is buffered is only part of a request, or an empty
// line, and the socket holds no more bytes (held.go; or after 1 MB more
// read without waiting); it is full (window requests, or replies past
// maxBatchBytes); or the client asked to be closed (QUIT), sent a malformed
// request, or the server shuts down.
//
// # Limits
//
// A client gets Redis's limits, with Redis's names. Its output buffer is the
// reply bytes produced for it and not yet written: the batch being collected
// (counted as replies arrive; past the hard limit the rest is dropped), or,
// for a subscriber, the queue of its stream (outbound). A connection reads
// no requests while it writes, so a client that never reads holds one batch
// at most, and backend readers never block on a client: they only fill
// reply slots. Requests are bounded while read (Limits; the query buffer
// limit counts all of a request's arguments). On the loop, the soft limit
// and WriteTimeout of a write that waits for room are deadlines the loop
// checks when room comes and from a timer (loopwrite.go), with the same
// log line and count as a goroutine's. The idle timeout runs only
// while a connection waits for a request, from the last byte read (or
// the last batch written), so blocked and subscribed clients are never
// idle. On a goroutine it is a read deadline; on the loop, a timer sweeps
// the loop's clients every min(IdleTimeout/4, 1s) (loopidle.go), so a
// client there is closed at most that much later than IdleTimeout.
//
// # Invariants of the loop
//
//  1. A connection's loop state (loopClient) is touched on the loop only,
//     but for laterErr and w.off, which the goroutine that completes a
//     batch sets before it posts resume or the rest of its write
//     (startWrite), and gone and held (atomic), which that goroutine
//     reads and swaps.
//  2. While a batch is left to its last reply (c.later), or its write
//     waits for room (lc.w.pending, loopwrite.go), the loop reads and
//     dispatches nothing of the connection's; resume, posted when the
//     batch is written, gives it back, or, for a quiet batch (nothing
//     buffered or seen since), the writer's swap of held, which the loop
//     takes at its next entry for the client (quietresume.go: no post,
//     no wake-up of the loop). Replies leave in order, one batch
//     at a time, as with a goroutine. So during a detour (c.detour.then
//     set): the batch stays open, its earlier replies complete into their
//     slots, and endDetour, posted by whoever completes the last of them
//     (batch.left, which then leaves out the current request), runs the
//     continuation on the loop and serves on; nothing closes the
//     connection meanwhile (Kill and Shutdown act after it). A goroutine
//     detour (c.detour.away) is the same, but for who ends it: the
//     goroutine that ran ServeCommand posts endGoroutineDetour.
//  3. A connection that comes to the loop stays there until it is
//     closed: its socket never moves back to Go's poller, so it keeps its
//     descriptor (CLIENT LIST's fd) and its place in the loop's count.
//     The Handler's calls for it run on the loop's thread or, one at a
//     time and never with the loop's, on a goroutine detour's.
//  4. The loop closes the socket only while it holds the connection, so a
//     write of a batch never meets a closed (or reused) descriptor; the
//     loop's own write of a batch's rest ends first (with an error, when
//     the client is killed or Shutdown's time is up: endWrite). A
//     batch that may block would hold a close (CLIENT KILL, Shutdown's
//     time up, a hang-up) for as long as it blocks, so the loop calls
//     ClientGone for it first, once, on a goroutine (clientGone), under
//     the connection's goneMu, which BatchDone and Closed take too: the
//     Handler's calls never overlap. Its reply is then not written, and
//     the connection is closed once it is in (resume).
//  5. The loop never waits but in epoll_wait: ServesOnLoop admits to the
//     loop's thread only requests whose Handler does not block (what must
//     follow earlier replies goes in AfterReplies' continuation, never a
//     wait; anything else is a goroutine detour's, and the fence that
//     keeps arrival order behind it only notes the other clients that
//     come meanwhile, with a timer to end it); MayBlock is the
//     Handler's to admit where serving it waits for nothing (in
//     fenceproxy, its pin goes on once the earlier replies are in, with a
//     spare connection or one dialled on a goroutine: OffLoop); the framer (Reader.Frame) never reads: it frames what is
//     buffered, the same however the bytes were cut into reads
//     (FuzzFramerChunks).
//  6. Shutdown serves what a client on the loop has already sent, then
//     closes it once its replies are written; when Shutdown's time is up,
//     once the batch in flight is written (a blocked one is ended first:
//     invariant 4).
//
// # Replies and errors
//
// Each request is answered through a resp.Reply, the slot of its place in
// the batch: the Handler (or whoever it hands the slot to) puts the reply's
// bytes in Buf, or an error value in Err, and calls Done. Done tells the
// batch (slot.Complete), the only place where an error value becomes RESP
// bytes (appendErr): an error that knows its reply (resp.CodedError) gets
// it (and is logged, at most once a second, if its reply sends the client
// to the log: resp.LoggedError), any other is logged and answered "-ERR fenceproxy: internal error
// (see the proxy's log)", so that no Go error text, address or secret
// reaches a client. Completing a slot with bytes allocates nothing.
package protocol
