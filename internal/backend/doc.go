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
// A Conn with Options.Loop has neither goroutine (loop.go): the event loop
// that serves the clients writes what they queued during its pass in one
// write at the pass's end, and reads and completes the replies itself.
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
