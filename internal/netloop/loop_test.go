//go:build linux

package netloop

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echo serves one detached socket on the loop: what it reads is written
// back at the end of the pass (Schedule), as a backend connection's
// requests are.
type echo struct {
	l    *Loop
	fd   int
	reg  Reg
	out  []byte
	done chan struct{}
}

func (e *echo) Ready(ev Events) {
	if ev&In == 0 {
		return
	}
	var buf [16]byte // small: one event needs several reads (invariant 3)
	for {
		n, err := Read(e.fd, buf[:])
		if n > 0 {
			if len(e.out) == 0 {
				e.l.Schedule(e)
			}
			e.out = append(e.out, buf[:n]...)
			continue
		}
		if err == ErrWouldBlock {
			return
		}
		e.l.Del(e.reg)
		Close(e.fd)
		close(e.done)
		return
	}
}

func (e *echo) Flush() {
	for len(e.out) > 0 {
		n, err := Write(e.fd, e.out)
		if err != nil {
			panic(err)
		}
		e.out = e.out[n:]
	}
}

func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return client, server
}

func TestEchoOverLoop(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, server := pair(t)
	defer client.Close()
	fd, err := Detach(server)
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{l: l, fd: fd, done: make(chan struct{})}
	// Bytes sent before the socket is added are still seen (an edge for
	// what is there at Add).
	client.Write([]byte("early "))
	added := make(chan error, 1)
	l.Post(func() {
		var err error
		e.reg, err = l.Add(fd, e)
		added <- err
	})
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("0123456789"), 1000)
	go client.Write(msg)
	want := append([]byte("early "), msg...)
	got := make([]byte, len(want))
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("echo differs")
	}
	client.Close()
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		t.Fatal("end of stream not seen")
	}
}

// TestPostWakesSleepingLoop: work given to a loop that waits in epoll from
// other goroutines is done (invariant 4), many times over.
func TestPostWakesSleepingLoop(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				ran := make(chan struct{})
				l.Post(func() { close(ran) })
				select {
				case <-ran:
				case <-time.After(10 * time.Second):
					t.Error("posted function did not run")
					return
				}
			}
		}()
	}
	wg.Wait()
}

type countFlush struct {
	n  int
	ch chan int
}

func (f *countFlush) Flush() { f.n++; f.ch <- f.n }

func TestScheduleFlushesAtEndOfPass(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := &countFlush{ch: make(chan int, 10)}
	order := make(chan string, 10)
	l.Post(func() {
		l.Schedule(f) // from the loop: runs after this function
		order <- "posted"
	})
	if got := <-order; got != "posted" {
		t.Fatal(got)
	}
	select {
	case n := <-f.ch:
		if n != 1 {
			t.Fatalf("flushed %d times", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not flushed")
	}
}

func TestDelDropsPendingEvents(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c1, s1 := pair(t)
	defer c1.Close()
	fd, err := Detach(s1)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan struct{}, 1)
	h := handlerFunc(func(Events) { called <- struct{}{} })
	done := make(chan struct{})
	l.Post(func() {
		reg, err := l.Add(fd, h)
		if err != nil {
			t.Error(err)
		}
		l.Del(reg)
		close(done)
	})
	<-done
	c1.Write([]byte("x"))
	select {
	case <-called:
		t.Fatal("handler called after Del")
	case <-time.After(100 * time.Millisecond):
	}
	Close(fd)
}

type handlerFunc func(Events)

func (f handlerFunc) Ready(ev Events) { f(ev) }

// writer writes rest to its socket on the loop as far as the socket takes
// it, and the remainder when Ready says there is room (Out): the pattern
// of a client's batch the socket does not take at once.
type writer struct {
	fd      int
	rest    []byte
	blocked int // writes that found the socket full
	done    chan struct{}
}

func (w *writer) Ready(ev Events) {
	if ev&Out != 0 {
		w.write()
	}
}

func (w *writer) write() {
	for len(w.rest) > 0 {
		n, err := Write(w.fd, w.rest)
		if err == ErrWouldBlock {
			w.blocked++
			return // Ready with Out comes once the peer reads
		}
		if err != nil {
			panic(err)
		}
		w.rest = w.rest[n:]
	}
	if w.done != nil {
		close(w.done)
		w.done = nil
	}
}

// TestOutEdgeAfterFullWrite: a write that found the socket full is
// followed by Ready with Out once the peer reads (invariant 3), however
// late it reads, so the loop writes the rest without polling.
func TestOutEdgeAfterFullWrite(t *testing.T) {
	l, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, server := pair(t)
	defer client.Close()
	fd, err := Detach(server)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd)
	msg := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MB: more than the socket buffers take
	w := &writer{fd: fd, rest: msg, done: make(chan struct{})}
	done := w.done
	blocked := make(chan int, 1)
	l.Post(func() {
		if _, err := l.Add(fd, w); err != nil {
			t.Error(err)
		}
		w.write()
		blocked <- w.blocked
	})
	if n := <-blocked; n == 0 {
		t.Fatal("the socket took 4 MB at once; the test needs a write that would block")
	}
	got := make([]byte, len(msg))
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("what was written differs")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not finish")
	}
}
