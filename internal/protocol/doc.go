// Package protocol is fenceproxy's client side: it accepts RESP connections,
// parses requests within Redis's limits, hands each to a Handler, and writes
// the replies back in request order.
//
// One goroutine serves one connection, top to bottom: read every request the
// client has already sent, start each one (a Handler may answer at once or
// later from another goroutine, e.g. when the backend replies), then wait for
// the whole batch and write it with a single system call. A pipeline of N
// requests thus has N requests in flight to the backend at once, and its
// replies still leave in order. redcon's own server loop runs its handler
// synchronously and parses without limits, so this package keeps redcon for
// what it does well, encoding replies (redcon.AppendBulk and friends), and
// owns the read loop.
package protocol
