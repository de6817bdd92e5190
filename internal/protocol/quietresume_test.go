package protocol

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// offLoopHandler answers each request with +NAME from a goroutine of its
// own after delay, as a lock worker or another loop's reader completes a
// reply: the batch is written there, while the loop sleeps.
type offLoopHandler struct {
	delay      time.Duration
	dispatched chan struct{} // if not nil, told of each request
}

func (h offLoopHandler) ServeCommand(_ *Conn, args [][]byte, p *resp.Reply) {
	name := string(args[0])
	if h.dispatched != nil {
		h.dispatched <- struct{}{}
	}
	go func() {
		time.Sleep(h.delay)
		p.Buf = append(p.Buf, "+"+name+"\r\n"...)
		p.Done()
	}()
}
func (offLoopHandler) BatchDone(*Conn)  {}
func (offLoopHandler) ClientGone(*Conn) {}
func (offLoopHandler) Closed(*Conn)     {}

// TestQuietBatchResumesWithoutWakingTheLoop: a client that sends one
// request at a time, each answered off the loop, is given back to the loop
// by whoever writes its reply, without waking the loop (no post, no
// eventfd write) for each. Posting resume after every batch woke the loop
// once per request.
func TestQuietBatchResumesWithoutWakingTheLoop(t *testing.T) {
	s, addr := startOnLoop(t, offLoopHandler{delay: time.Millisecond})
	nc, rd := dialClient(t, addr)
	do(t, nc, rd, "FIRST")
	const requests = 100
	before := s.Loop.Wakeups()
	for range requests {
		do(t, nc, rd, "NEXT")
	}
	if woke := s.Loop.Wakeups() - before; woke > requests/4 {
		t.Fatalf("the loop was woken %d times for %d requests answered off the loop; want almost none", woke, requests)
	}
	if s.LoopClients() != 1 {
		t.Fatalf("loop clients %d, want 1", s.LoopClients())
	}
}

// TestBytesDuringAQuietBatchAreServed: a request that arrives while the
// previous one's reply is on its way (off the loop) is served once that
// reply is written, in order, whichever of the two comes first.
func TestBytesDuringAQuietBatchAreServed(t *testing.T) {
	_, addr := startOnLoop(t, offLoopHandler{delay: 2 * time.Millisecond})
	nc, rd := dialClient(t, addr)
	for round := range 50 {
		nc.Write([]byte(multibulk("A")))
		// The second request: at once, during the first's flight, or
		// about when its reply is written.
		time.Sleep(time.Duration(round%5) * 500 * time.Microsecond)
		nc.Write([]byte(multibulk("B")))
		nc.SetReadDeadline(time.Now().Add(replyWait))
		for _, want := range []string{"+A\r\n", "+B\r\n"} {
			if line, err := rd.ReadString('\n'); err != nil || line != want {
				t.Fatalf("round %d: %q, %v; want %q", round, line, err, want)
			}
		}
	}
}

// TestKillDuringAQuietBatch: a client killed while its reply is on its
// way off the loop is closed once it is written, though no edge of its
// own comes (it sends nothing more).
func TestKillDuringAQuietBatch(t *testing.T) {
	dispatched := make(chan struct{}, 1)
	s, addr := startOnLoop(t, offLoopHandler{delay: 20 * time.Millisecond, dispatched: dispatched})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte(multibulk("SLOW")))
	waitChan(t, dispatched, "the request dispatched")
	s.Each(func(c *Conn) { c.Kill() })
	waitConns(t, s, 0)
	nc.SetReadDeadline(time.Now().Add(replyWait))
	rd := bufio.NewReader(nc)
	for {
		if _, err := rd.ReadString('\n'); err != nil {
			break // closed (with or without the reply, as Redis may)
		}
	}
}

// TestQuietResumeUnderLoad: clients that send their next request the
// moment a reply written off the loop reaches them, many times over: every
// request is answered. A next request that arrived between the loop's look
// at who holds the connection and its mark that it wants it back (while
// the reply's writer gave the connection back without a post) was left
// unread until the client sent more, and the client waited for good (CI:
// test/contract TestTokenOrderEqualsGrantOrder, 'i/o timeout').
func TestQuietResumeUnderLoad(t *testing.T) {
	// Widen the window: the writer, on its goroutine, gives the
	// connection back while the loop is between its two looks.
	testHookInFlight = func() { time.Sleep(200 * time.Microsecond) }
	testHookGiveBack = func() { time.Sleep(100 * time.Microsecond) }
	t.Cleanup(func() { testHookInFlight, testHookGiveBack = nil, nil })
	_, addr := startOnLoop(t, offLoopHandler{})
	const clients, requests = 8, 300
	errs := make(chan error, clients)
	for range clients {
		go func() {
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			rd := bufio.NewReader(nc)
			req := []byte(multibulk("NEXT"))
			for i := range requests {
				nc.Write(req)
				nc.SetReadDeadline(time.Now().Add(replyWait))
				if line, err := rd.ReadString('\n'); err != nil || line != "+NEXT\r\n" {
					errs <- fmt.Errorf("request %d: %q, %v", i, line, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// heldReplyHandler answers NOLOOP (served by a goroutine detour: see
// onLoop) only when the test says so, and anything else at once.
type heldReplyHandler struct {
	got     chan *resp.Reply
	proceed chan struct{} // ServeCommand returns once it is closed
}

func (h heldReplyHandler) ServeCommand(_ *Conn, args [][]byte, p *resp.Reply) {
	if string(args[0]) == "NOLOOP" {
		h.got <- p
		<-h.proceed
		return
	}
	p.Buf = append(p.Buf, "+OK\r\n"...)
	p.Done()
}
func (heldReplyHandler) BatchDone(*Conn)  {}
func (heldReplyHandler) ClientGone(*Conn) {}
func (heldReplyHandler) Closed(*Conn)     {}

// TestDetourReplyWrittenWithoutTheLoop: the reply to a request served by a
// goroutine detour, last of its batch, is written where it completes, even
// while the loop is busy: a lock grant is checked against its lease when
// it completes, and nothing may hold its reply after that. When the loop
// had to end the detour first, the reply waited for it (a Redisson grant
// replied after its lease was over, in the fault suite).
func TestDetourReplyWrittenWithoutTheLoop(t *testing.T) {
	h := heldReplyHandler{got: make(chan *resp.Reply, 1), proceed: make(chan struct{})}
	s, addr := startOnLoop(t, h)
	nc, rd := dialClient(t, addr)
	nc.Write([]byte(multibulk("NOLOOP")))
	var p *resp.Reply
	select {
	case p = <-h.got:
	case <-time.After(replyWait):
		t.Fatal("NOLOOP never dispatched")
	}
	release := holdLoop(s) // the loop is busy from now on
	close(h.proceed)       // the detour's end is posted behind that
	p.Buf = append(p.Buf, "+LATE\r\n"...)
	p.Done()
	nc.SetReadDeadline(time.Now().Add(replyWait))
	line, err := rd.ReadString('\n')
	release()
	if err != nil || line != "+LATE\r\n" {
		t.Fatalf("the reply while the loop was busy: %q, %v", line, err)
	}
	// And the client goes on, on the loop.
	nc.Write([]byte(multibulk("NEXT")))
	nc.SetReadDeadline(time.Now().Add(replyWait))
	if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("NEXT: %q, %v", line, err)
	}
}
