// Command idleclients measures what idle client connections cost a server:
// it reads the server's resident memory, opens N connections, checks each is
// really accepted (two pipelined PINGs answered with +PONG on every one), reads the resident
// memory again while they sit idle, then closes them.
//
//	go run ./scripts/idleclients -addr 127.0.0.1:7379 -pid PID [-n 10000] [-forwarded]
//
// -forwarded checks each connection with EXISTS (answered with an integer)
// instead of PINGs: a command fenceproxy forwards to Redis, which keeps a
// client on its --serve-loop, where a PING behind another moves it to a
// goroutine of its own;
// so with it the figure is that of idle clients on the loop.
//
// It prints one RESULT line: clients=N accepted=N rss_before_mib=…
// rss_mib=… (VmRSS of PID with the clients open) hwm_mib=… (VmHWM).
// The caller raises the open-file limit (ulimit -n) for both sides.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/scripts/internal/procmem"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7379", "`host:port` of the server")
	pid := flag.Int("pid", 0, "the server's process id (its /proc/PID/status is read)")
	n := flag.Int("n", 10000, "idle connections to open")
	par := flag.Int("parallel", 100, "connections opened at once")
	settle := flag.Duration("settle", 2*time.Second, "idle time before memory is read")
	flag.BoolVar(&forwarded, "forwarded", false, "check each connection with EXISTS, which a proxy forwards, instead of PING")
	flag.Parse()
	if err := run(*addr, *pid, *n, *par, *settle); err != nil {
		fmt.Fprintf(os.Stderr, "idleclients: %v\n", err)
		os.Exit(1)
	}
}

func run(addr string, pid, n, par int, settle time.Duration) error {
	if pid <= 0 || n < 1 || n > 100000 || par < 1 {
		return errors.New("need -pid > 0, -n in 1..100000, -parallel >= 1")
	}
	before, _, err := procmem.RSS(pid)
	if err != nil {
		return err
	}
	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	var (
		mu       sync.Mutex
		firstErr error
		failed   int
		wg       sync.WaitGroup
		sem      = make(chan struct{}, par)
	)
	t0 := time.Now()
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			c, err := open(addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = fmt.Errorf("connection %d: %w", i, err)
				}
				return
			}
			conns[i] = c
		}(i)
	}
	wg.Wait()
	opened := time.Since(t0)
	time.Sleep(settle)
	after, hwm, err := procmem.RSS(pid)
	if err != nil {
		return err
	}
	// Every connection must still be alive and answering after the wait.
	alive := 0
	for _, c := range conns {
		if c != nil && ping(c, bufio.NewReader(c)) == nil {
			alive++
		}
	}
	fmt.Printf("RESULT clients=%d accepted=%d alive_after=%d open_s=%.2f rss_before_mib=%.1f rss_mib=%.1f hwm_mib=%.1f\n",
		n, n-failed, alive, opened.Seconds(), procmem.MiB(before), procmem.MiB(after), procmem.MiB(hwm))
	if firstErr != nil {
		fmt.Printf("ERROR_SAMPLE %v\n", firstErr)
	}
	return nil
}

// forwarded: probe with EXISTS instead of PING (-forwarded).
var forwarded bool

// open dials addr and checks the server answers the probe on the new connection.
func open(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if err := ping(c, bufio.NewReader(c)); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// ping sends the probe (PING, or with -forwarded EXISTS) and checks its answer.
func ping(c net.Conn, r *bufio.Reader) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	// Two PINGs in one write: the second, behind the first, waits for its
	// reply, which moves a client of fenceproxy's serve loop to a
	// goroutine of its own (one PING alone stays on the loop).
	req, name, replies := "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", "PING", 2
	if forwarded {
		req, name, replies = "*2\r\n$6\r\nEXISTS\r\n$16\r\nidleclients:none\r\n", "EXISTS", 1
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return err
	}
	for range replies {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if (!forwarded && line != "+PONG\r\n") || (forwarded && !strings.HasPrefix(line, ":")) {
			return fmt.Errorf("%s answered %q", name, strings.TrimSpace(line))
		}
	}
	return nil
}
