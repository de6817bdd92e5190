// Package protocol is fenceproxy's client side: it accepts RESP connections,
// parses requests within Redis's limits, hands each to a Handler, and writes
// the replies back in request order.
//
// One goroutine serves one connection, top to bottom: read every request the
// client has already sent, start each one (a Handler may answer at once or
// later from another goroutine, e.g. when the backend replies), then wait for
// the whole batch and write it with a single system call. A pipeline of N
// requests thus has N requests in flight to the backend at once, and its
// replies still leave in order. A batch that ends because the client has sent
// nothing more (every unpipelined request) is instead written by whoever
// completes its last reply, while the connection's goroutine is already back
// in its read (see later.go): one goroutine wake-up fewer per request.
// redcon's own server loop runs its handler synchronously and parses
// without limits, so this package keeps redcon for what it does well,
// encoding replies (redcon.AppendBulk and friends), and owns the read loop.
//
// With Server.Loop, plaintext clients start on an event loop instead (see
// "Serving from an event loop" below and loop.go): one goroutine serves
// every client's forwarded requests, with the same batches, limits and
// order, and a client moves to a goroutine of its own, as above, at the
// first request the loop cannot serve without waiting.
//
// # When a batch is written
//
// Every complete request is answered without waiting for more bytes from
// the client, as Redis answers it; requests that arrive together still
// share one write. A batch is written (all of it, replies in request order)
// as soon as one of these holds:
//
//   - the client has sent nothing more: the read buffer is empty after a
//     request (every unpipelined request, the end of most pipelines);
//   - what is buffered is only part of a request (PING\r\nPI, a multibulk
//     header without its arguments, a big argument on its way) or no
//     request at all (an empty line, which is skipped as Redis skips it),
//     and the socket holds no more bytes: the batch is written before the
//     read that would wait for the client (see held.go), or after 1 MB more
//     read without waiting, for a client streaming a huge request;
//   - it is full: window requests, or replies past maxBatchBytes;
//   - the client asked to be closed (QUIT), sent a malformed request, or
//     the server shuts down.
//
// # Limits
//
// A client gets Redis's limits, with Redis's names. Its output buffer is the
// reply bytes produced for it and not yet written: for an ordinary client,
// the batch being collected and written (counted as replies arrive, so the
// hard limit is seen before the whole batch is in; past it the rest is
// dropped); for a subscriber, the queue of its stream (see outbound). A
// connection reads no requests while it writes, so a client that never reads
// holds one batch at most, even with no limit: TCP pushes back on it, and
// backend readers never block on a client, since they only fill reply
// slots. Requests are bounded while read (Limits, with the query buffer
// limit counted over all of a request's arguments), and the idle timeout
// runs only while a connection waits for a request, so blocked and
// subscribed clients are never idle, even with part of their next request
// sent. It counts from the last byte read, as Redis counts from a client's
// last read, so a request that trickles in is not idle while bytes come.
//
// # Serving from an event loop
//
// A goroutine per connection costs a goroutine wake-up per request (three
// per unpipelined request, with the backend's writer and reader), and on a
// machine whose cores are busy those are wake-ups of OS threads: they made
// the proxy's CPU per request twice twemproxy's (docs/performance.md,
// "The serving layer"). With Server.Loop (a netloop.Loop) and a Handler
// that is a LoopHandler, a plaintext client's socket is taken out of Go's
// poller when it is accepted and served by the loop: when the socket is
// ready, the loop reads what the client sent, dispatches every whole
// multibulk request the Handler serves without blocking
// (LoopHandler.ServesOnLoop; in fenceproxy, a plainly forwarded command
// of a client in the plainest state) as serve would, ends the batch when
// the client has sent nothing more (or at a full batch, or 64 requests:
// the loop cannot wait to learn their replies' size), and goes on to the
// next ready client. The batch is left to its last reply, as later.go
// leaves one, and written where that reply completes it: on the loop
// itself when the backend's connections are served by the same loop
// (backend.Options.Loop), so that no goroutine is woken between the
// client's request and its reply.
//
// At anything else (an inline, malformed, empty or over-long request, a
// command that may block, pins a connection, subscribes, changes the
// protocol or the database, the proxy's own commands), the client leaves
// the loop: its socket goes back to Go's poller, and a goroutine goes on
// with serve from the request the loop did not serve; if that request is
// the first of its batch, the loop waits for its dispatch (at most
// leaveWait) before it serves anyone else, so that it reaches Redis ahead
// of what other clients sent after it. A batch whose write the socket does
// not take at once leaves the same way, the rest of its write finished by
// a goroutine. After two batches in a row that the loop would have served
// (returnAfter), with nothing more sent, the goroutine gives the client
// back to the loop (returnToLoop): requests read by one loop in epoll's
// order keep the order they arrived in across clients, as Redis's own
// loop keeps it, where goroutines woken together run in any order.
// Invariants:
//
//  1. A connection's loop state (loopClient) is touched on the loop only,
//     but for laterErr, which the goroutine that completes a batch sets
//     before it posts resume.
//  2. While a batch is left to its last reply (c.later), the loop reads
//     and dispatches nothing of the connection's; resume, posted when the
//     batch is written, gives it back. Replies leave in order, one batch
//     at a time, as with a goroutine.
//  3. A connection leaves the loop only on the loop and only while the
//     loop holds it (not c.later), except a batch whose write did not
//     finish, which the loop hands over with the write still owning the
//     batch: the goroutine that finishes the write releases it as
//     later.go does, and the connection's new goroutine waits for it. It
//     comes back only from its goroutine, between batches, with nothing
//     buffered and its last batch written; the loop takes it on the loop
//     (the goroutine touches it no more after posting that).
//  4. The loop closes the socket only while it holds the connection, so a
//     write of a batch never meets a closed (or reused) descriptor.
//  5. The loop never waits, but in leaveLoop for at most leaveWait:
//     ServesOnLoop admits only requests whose
//     Handler neither blocks nor asks for MayBlock, WaitReplies,
//     TakeWrites or EnablePushes (a Handler that does anyway is logged as
//     a bug and its client moved to a goroutine); Reader.bufferedRequest
//     calls a request whole only when ReadCommand parses it from the
//     buffer without reading (FuzzBufferedRequest).
//  6. Shutdown serves what a client on the loop has already sent, then
//     closes it once its replies are written; when Shutdown's time is up,
//     once the batch in flight is written.
//
// Not on the loop: TLS clients, servers with an IdleTimeout (read
// deadlines need Go's poller), and Handlers that are not LoopHandlers.
//
// # Replies and errors
//
// Each request is answered through a resp.Reply, the slot of its place in
// the batch: the Handler (or whoever it hands the slot to) puts the reply's
// bytes in Buf, or an error value in Err, and calls Done. Done tells the
// batch (slot.Complete), which is where, and the only place where, an
// error value becomes RESP bytes (appendErr): an error that knows its
// reply (resp.CodedError) gets it, any other is logged and answered
// "-ERR fenceproxy: internal error (see the proxy's log)", so that no Go
// error text, address or secret reaches a client. Completing a slot with
// bytes allocates nothing.
package protocol
