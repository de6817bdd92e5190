// Package resp is fenceproxy's RESP codec and the reply slot every request
// is answered through. It imports nothing of the proxy's: every other
// package may use it, and none of them needs the client side (protocol) to
// read or carry a reply.
//
// # The codec
//
//   - AppendReply reads one whole reply from a stream and appends its exact
//     bytes, RESP2 and RESP3 alike (an attribute with the reply it
//     annotates), nested to any depth (it counts what is owed instead of
//     recursing: a script's reply can nest thousands deep): how the proxy
//     relays what Redis wrote, byte for byte. A reply with a bulk over
//     MaxBulk is read to its end and dropped (ErrTooLarge): that request
//     fails and the stream stays in step; only bytes that are not RESP
//     (ErrBadReply) cost the connection.
//   - Size and Elements frame replies already in memory: the length of the
//     first whole reply, and the exact bytes of an array's elements (for
//     merging the parts of a request split across masters).
//   - Parse decodes a small RESP2 reply (at most MaxDepth deep) into Go
//     values, for the proxy's own use (its lock scripts, WAIT, COMMAND):
//     an error reply becomes an Error.
//   - ParseInt parses an integer as Redis parses one.
//   - AppendCommand and AppendError encode a request and an error reply.
//     Other replies are encoded with redcon's helpers, which are good.
//
// The stream reader and the in-memory framing apply one set of rules
// (lineEnd, length): a reply Size accepts is one AppendReply reads whole.
//
// # The reply slot
//
// A Reply carries the answer to one request from whoever serves it to
// whoever waits for it, as either RESP bytes (Buf) or an error value (Err),
// never both. Redis's own error replies are bytes: they are Redis's
// answer, relayed as it wrote them. An Err is a failure on the proxy's side
// (the request never reached Redis, its connection broke, a node is
// refused...), a typed error that the code in between can test with
// errors.Is instead of comparing reply text. It becomes RESP bytes once,
// where the client's reply is written (package protocol): an error that
// knows its reply implements CodedError (Error does), any other is logged
// and answered as an internal error.
//
// Done hands a Reply to its Completer, exactly once. A Completer is what
// waits: the client connection's batch (which counts and writes the reply),
// a WaitGroup (NewReply, for the proxy's own requests) or a function
// (NewReplyFunc, for a reply looked at before the client gets it). Done
// allocates nothing.
package resp
