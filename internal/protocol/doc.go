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
// loop.go): one goroutine serves every client's forwarded requests, with
// the same batches, limits and order, and a client moves to a goroutine of
// its own, as above, at the first request the loop cannot serve without
// waiting.
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
