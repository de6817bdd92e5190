// Package netloop serves sockets from one event loop: a goroutine that
// waits in epoll for any of its sockets to be ready, serves every ready one
// in turn, and then runs what was deferred to the end of the pass. It is
// how fenceproxy serves unpipelined passthrough requests without a
// goroutine wake-up per request (docs/how-it-works.md, "The data path").
//
// # Why not Go's own poller
//
// With a goroutine per socket, every request that arrives wakes a
// goroutine: the client's, then the backend writer's, then the backend
// reader's. On a machine whose cores are busy with Redis and the load
// generator, those wake-ups are wake-ups of OS threads (futex, epoll_wait,
// the runtime's sysmon polling every 20 µs while threads come and go): a
// `perf` profile of the proxy under redis-benchmark put most of its CPU in
// the kernel's context switches and wake-ups (docs/performance.md, "The
// serve loop against twemproxy"). A loop instead wakes once for
// everything that is ready, reads each ready client, sends all of their
// requests to Redis in one write per backend connection at the end of the
// pass (Schedule), and writes each client's replies as soon as the reply
// that completes them is read: the shape of twemproxy's one thread.
//
// A socket served here must not be known to Go's poller as well: the
// poller would be woken by every byte that arrives too. Owners hand the
// loop a descriptor of their own: a dup of a net.Conn's, whose net.Conn
// is then closed (Detach, DetachListener), or one the loop accepted
// (Accept). A socket stays the loop's for its whole life.
//
// # Invariants
//
//  1. Ready, posted functions and Flush run on the loop's goroutine only,
//     one at a time, never at the same time as each other: state that only
//     they touch needs no lock.
//  2. Add and Del run on the loop's goroutine (from a Ready, a posted
//     function or a Flush); Post and Schedule may be called from any
//     goroutine.
//  3. Sockets are registered edge-triggered: Ready is called once per
//     change (new bytes, new room to write, hang-up), so a handler reads
//     until a read comes back short (or would block) and remembers what it
//     did not finish; it is not called again for bytes it left unread.
//     Writes are the same: a handler writes until a write would block
//     (ErrWouldBlock) and keeps the rest; Ready with Out comes once the
//     socket has room again (or breaks). Every socket is registered for
//     both from Add on: interest in writing costs nothing until a write
//     has found the socket full (the kernel signals room only after
//     that), so there is none to take back once the rest is written; an
//     Out bit that comes along with In is only a hint, and a handler with
//     nothing to write ignores it.
//  4. A Post or Schedule from another goroutine while the loop waits in
//     epoll wakes it (through an eventfd); one made while the loop is busy
//     costs no system call: the pass in progress runs it before it waits.
//  5. The loop never blocks except in epoll_wait; what it calls must not
//     either (a handler that must wait hands its socket to a goroutine).
package netloop
