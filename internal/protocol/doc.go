// Package protocol is fenceproxy's client side: it accepts RESP connections,
// parses requests within Redis's limits, hands each to a Handler, and writes
// the replies back in request order. The long form: docs/design/protocol.md.
//
// A connection is served by one of two transports for its whole life, with
// the same parser (Reader.Frame), batches, limits and reply order: a
// goroutine of its own (serve; with --serve-loop=false, or a Handler that is
// not a LoopHandler) or the event loop (Server.Loop, a netloop.Loop, with a
// LoopHandler; loop.go), which serves every ready client in turn. Either
// reads every request the client has sent, starts each (a Handler may answer
// at once or later, from any goroutine) and writes the batch in one system
// call: a pipeline of N requests has N in flight. On the loop, what cannot
// be served without waiting takes a detour (AfterReplies, OffLoop) or a
// goroutine detour (ServesOnLoop false), and the client stays there.
//
// # When a batch is written
//
// Every complete request is answered without waiting for more bytes from the
// client; requests that arrive together share one write. A batch is written,
// whole and in request order, as soon as: the client has sent nothing more;
// what is buffered is only part of a request, or an empty line, and the
// socket holds no more bytes (held.go; or after 1 MB more read without
// waiting); it is full (window requests, or replies past maxBatchBytes); or
// the client asked to be closed (QUIT), sent a malformed request, or the
// server shuts down.
//
// # Limits
//
// A client gets Redis's limits, with Redis's names. Its output buffer is the
// reply bytes produced for it and not yet written: the batch being collected
// (past the hard limit the rest is dropped) or a subscriber's stream queue
// (outbound). A connection reads no requests while it writes, so a client
// that never reads holds one batch at most, and backend readers never block
// on it. Requests are bounded while read (Limits; the query buffer limit
// counts all of a request's arguments). The idle timeout runs only while a
// connection waits for a request, from its last byte read or batch written:
// blocked and subscribed clients are never idle. On the loop a client is
// closed up to min(IdleTimeout/4, 1s) late (loopidle.go).
//
// # Invariants of the loop
//
//  1. A connection's loop state (loopClient) is touched on the loop only,
//     but for laterErr and w.off, which the goroutine that completes a batch
//     sets before it posts resume or the rest of its write (startWrite), and
//     gone and held (atomic), which that goroutine reads and swaps.
//  2. While a batch is left to its last reply (c.later), or its write waits
//     for room (lc.w.pending), the loop reads and dispatches nothing of the
//     connection's, until resume (posted when the batch is written) or, for
//     a quiet batch (nothing buffered or seen since), the writer's swap of
//     held, taken at the loop's next entry for the client (quietresume.go).
//     Replies leave in order, one batch at a time. So in a detour
//     (c.detour.then set) the batch stays open, its earlier replies complete
//     into their slots, and endDetour, posted by whoever completes the last
//     (batch.left, which then leaves out the current request), runs the
//     continuation on the loop and serves on; nothing closes the connection
//     meanwhile (Kill and Shutdown act after it). A goroutine detour
//     (c.detour.away) is the same, but its goroutine posts endGoroutineDetour.
//  3. A connection that comes to the loop stays there until it is closed:
//     its socket never moves back to Go's poller, so it keeps its descriptor
//     (CLIENT LIST's fd) and its place in the loop's count. The Handler's
//     calls for it run on the loop's thread or, one at a time and never with
//     the loop's, on a goroutine detour's.
//  4. The loop closes the socket only while it holds the connection, so a
//     batch's write never meets a closed (or reused) descriptor; the loop's
//     own write of a batch's rest ends first (endWrite: with an error if the
//     client is killed or Shutdown's time is up). A batch that may block
//     would hold a close (CLIENT KILL, Shutdown's time up, a hang-up) while
//     it blocks, so the loop first calls ClientGone for it, once, on a
//     goroutine (clientGone), under the connection's goneMu, which BatchDone
//     and Closed take too: the Handler's calls never overlap. Its reply is
//     then not written; the connection closes once it is in (resume).
//  5. The loop never waits but in epoll_wait. ServesOnLoop admits to its
//     thread only requests whose Handler does not block: what must follow
//     earlier replies goes in AfterReplies' continuation, never a wait;
//     anything else is a goroutine detour's, whose arrival-order fence only
//     notes the other clients that come meanwhile, with a timer to end it.
//     MayBlock is the Handler's to admit where serving it waits for nothing
//     (in fenceproxy its pin goes on once the earlier replies are in, with a
//     spare connection or one dialled on a goroutine: OffLoop). The framer
//     (Reader.Frame) never reads: it frames what is buffered, the same
//     however the bytes were cut into reads (FuzzFramerChunks).
//  6. Shutdown serves what a client on the loop already sent, and closes it
//     once its replies are written; when Shutdown's time is up, once the
//     batch in flight is written (a blocked one ended first: invariant 4).
//
// # Replies and errors
//
// Each request is answered through a resp.Reply, its slot in the batch: the
// Handler (or whoever it hands the slot to) sets Buf (the reply's bytes) or
// Err (an error value) and calls Done, which tells the batch (slot.Complete),
// the only place an error value becomes RESP bytes (appendErr). A
// resp.CodedError gets its own reply (logged at most once a second if a
// resp.LoggedError); any other is logged and answered "-ERR fenceproxy:
// internal error (see the proxy's log)": no Go error text, address or secret
// reaches a client. Completing a slot with bytes allocates nothing.
package protocol
