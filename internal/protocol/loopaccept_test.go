package protocol

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"testing"
	"time"
)

// TestLoopAcceptsInArrivalOrder: a fresh client whose first request
// arrives with its connection is served before what a client already on
// the loop sent after it (scripts/orderrace -no-first). When a goroutine
// accepted the client and posted it to the loop, the loop served the
// other client's later request first, round after round: the first
// client's registration came after it.
func TestLoopAcceptsInArrivalOrder(t *testing.T) {
	h := &orderHandler{}
	s, addr := startOnLoop(t, h)
	old, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldRd := bufio.NewReader(old)
	do(t, old, oldRd, "HELLO")
	h.take()
	for round := range 20 {
		release := holdLoop(s)
		fresh, err := net.Dial("tcp", addr)
		if err != nil {
			release()
			t.Fatal(err)
		}
		fresh.Write([]byte(multibulk("FIRST")))
		waitReceived(t, fresh) // its bytes are in before the other client writes
		old.Write([]byte(multibulk("AFTER")))
		waitReceived(t, old)
		release()
		freshRd := bufio.NewReader(fresh)
		for _, r := range []struct {
			rd   *bufio.Reader
			nc   net.Conn
			name string
		}{{freshRd, fresh, "FIRST"}, {oldRd, old, "AFTER"}} {
			r.nc.SetReadDeadline(time.Now().Add(replyWait))
			if line, err := r.rd.ReadString('\n'); err != nil || line != "+"+r.name+"\r\n" {
				t.Fatalf("round %d: %s: %q, %v", round, r.name, line, err)
			}
		}
		fresh.Close()
		if got, want := h.take(), "FIRST:loop AFTER:loop"; got != want {
			t.Fatalf("round %d: dispatched %q, want %q", round, got, want)
		}
	}
}

// TestLoopAcceptRefusesPastMaxClients: the loop's accept refuses a client
// past MaxClients with Redis's error and closes it, and takes a new one
// once a place is free.
func TestLoopAcceptRefusesPastMaxClients(t *testing.T) {
	h := &orderHandler{}
	s, addr := startServer(t, h, func(s *Server) {
		onLoop(t, s)
		s.MaxClients = 1
	})
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	do(t, first, bufio.NewReader(first), "ONE")
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(replyWait))
	rd := bufio.NewReader(second)
	if line, err := rd.ReadString('\n'); err != nil || line != "-ERR max number of clients reached\r\n" {
		t.Fatalf("second client: %q, %v", line, err)
	}
	if _, err := rd.ReadByte(); err == nil {
		t.Fatal("the refused client was not closed")
	}
	first.Close()
	waitConns(t, s, 0)
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	do(t, third, bufio.NewReader(third), "THREE")
	if s.LoopClients() != 1 {
		t.Fatalf("loop clients %d, want 1", s.LoopClients())
	}
}

// TestLoopAcceptStopsAtShutdown: once Shutdown began, the loop's
// listening socket is closed (a new client is refused by the kernel) and
// Serve returns ErrServerClosed.
func TestLoopAcceptStopsAtShutdown(t *testing.T) {
	s := NewServer(&orderHandler{}, slog.New(slog.DiscardHandler))
	onLoop(t, s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	do(t, nc, bufio.NewReader(nc), "PING")
	nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != ErrServerClosed {
			t.Fatalf("Serve returned %v", err)
		}
	case <-time.After(replyWait):
		t.Fatal("Serve did not return after Shutdown")
	}
	waitFor(t, "the listening socket closed", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}
