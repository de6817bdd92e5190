// Package backend carries client requests to a Redis server and their replies
// back, byte for byte.
//
// A Pool holds a few long-lived connections to one Redis node. Each Conn is a
// pipeline shared by many clients: requests are appended to one write buffer
// and sent together by a writer goroutine, and a reader goroutine copies each
// reply, exactly as Redis wrote it, into the resp.Reply of the request at the
// head of the queue. Many clients' requests thus travel in one write and one
// read, which is where a proxy wins back the hop it adds.
//
// Tried and dropped: no writer goroutine, the first caller finding the
// connection idle writing for everyone (fewer goroutine wake-ups). Measured
// with redis-benchmark -c 50 on 2 cores it coalesced less and lost 20-50% at
// -P 16. The writer instead yields once before each write so clients made
// ready by the same network poll append first.
//
// # A connection served by an event loop
//
// A Conn with Options.Loop has neither goroutine (loop.go): the event loop
// that serves the clients (protocol's Server.Loop) writes what they queued
// during its pass in one write at the pass's end, and reads and completes
// the replies itself, so a forwarded request and its reply wake no
// goroutine. With 50 clients at -P 1 the pass's one write carries a dozen
// clients' requests, and one connection per master (fenceproxy's
// --backend-conns default with the loop) beat four when the loop was
// built (git log -p docs/performance.md). Invariants:
//
//  1. The socket is the loop's alone (netloop.Detach): only the loop reads
//     and writes it, but for a reply longer than the read buffer (or too
//     large to relay), which a goroutine reads with AppendReply while the
//     loop reads nothing of the socket (lend), and then hands back.
//  2. A request is queued under c.mu, and the first request queued since
//     the last write schedules one Flush for the pass's end (scheduled):
//     however many clients queue in one pass, one write takes them all, in
//     queue order. A write the socket does not take at once is finished
//     when the loop finds room; requests queued meanwhile follow it.
//  3. Replies are matched to the queue's head in order, every reply whole
//     in the buffer (resp.Frame) under one lock, and completed outside it.
//     Bytes that are not RESP, or a reply no request asked for, break the
//     connection (out of step), as on a goroutine connection.
//  4. The loop never waits: a break fails the requests on the connection
//     with ErrLost on the loop, and the reconnection (a dial) runs on a
//     goroutine, which puts the new socket on the loop.
//
// A NoReconnect connection (one client's own) is served by the loop too,
// with OnPush (a tracking client's, or one as another Redis user) called on
// the loop in the pushes' place among the replies; TLS and ReplyTimeout
// connections keep their goroutines.
//
// # A connection its user reads and writes
//
// A SyncConn (exchange.go) has no goroutine either, nor a queue: its one
// user, the lock writer (internal/locks), hands Exchange a batch already
// encoded (its scripts and one WAIT) and the batch's replies; Exchange
// writes the batch in one write on the caller's goroutine, reads the
// replies there in order and completes each as it is read, and returns
// when the last is in. The lock writer sends nothing else while a batch
// is out, so a Conn's writer and reader were only handoffs for it. The
// SyncConn's dialling, ROLE and Admit check, Gate, OnBreak and
// reconnection in the background are a Conn's (it wraps one), and so are
// its failures: the Gate's refusal or ErrUnavailable before anything is
// sent, ErrLost for each reply not read when the connection broke.
// ReplyTimeout bounds a whole batch there, set as a read deadline once in
// a quarter of it rather than per reply.
//
// A request that gets no reply from Redis is completed with a typed error
// in its Reply's Err, never with reply text: ErrUnavailable (Redis could
// not be reached: nothing was sent), ErrLost (the connection broke with the
// request on it: it may or may not have run) or a closed Gate's refusal (a
// node not to be written to now). Callers test them with errors.Is; each
// knows the reply a client gets for it (resp.CodedError), which is written
// once, where the client's reply is. Redis's own error replies are Redis's
// answer and stay bytes in Buf. The package imports the codec (resp) and no
// client side: it never writes to a client.
//
// The go-redis client is not used here because it parses replies into Go
// values, and a status reply and a bulk string become the same string: a proxy
// must hand the client what Redis said.
package backend
