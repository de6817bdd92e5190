// Command trackbench measures client-side caching through a server: each
// client turns CLIENT TRACKING on (RESP3, so invalidations come as pushes
// on the same connection) and loops GET of random keys, a writer SETs a
// key now and then, and it prints the GETs per second.
//
//	go run ./scripts/trackbench -addr 127.0.0.1:7379 [-clients 50] [-keys 1000] [-d 5s]
//
// -track=false runs the same clients without tracking, for scale. With
// fenceproxy in front of a Redis Cluster each tracking client has a
// connection of its own to every master (package upstream/tracking); a
// benchmark of that path, not a test. Traffic goes only to -addr; every
// key is under trackbench:. It prints one RESULT line.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

var (
	addr     = flag.String("addr", "127.0.0.1:7379", "`host:port` of the server")
	clients  = flag.Int("clients", 50, "tracking clients")
	keyCount = flag.Int("keys", 1000, "keys read at random")
	duration = flag.Duration("d", 5*time.Second, "how long to run")
	writes   = flag.Duration("write-every", 10*time.Millisecond, "how often the writer SETs a random key (0: never)")
	track    = flag.Bool("track", true, "turn CLIENT TRACKING on (false: the same clients without it, for scale)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trackbench:", err)
		os.Exit(1)
	}
}

type conn struct {
	nc net.Conn
	rd *bufio.Reader
}

func dial() (*conn, error) {
	nc, err := net.DialTimeout("tcp", *addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, rd: bufio.NewReaderSize(nc, 16<<10)}, nil
}

// do sends args and returns the reply, skipping pushes ahead of it; pushes
// counts them.
func (c *conn) do(pushes *int64, args ...string) ([]byte, error) {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	if _, err := c.nc.Write(resp.AppendCommand(nil, b)); err != nil {
		return nil, err
	}
	for {
		r, err := resp.AppendReply(nil, c.rd)
		if err != nil {
			return nil, err
		}
		if len(r) > 0 && r[0] == '>' {
			if pushes != nil {
				*pushes++
			}
			continue
		}
		if len(r) > 0 && r[0] == '-' {
			return r, fmt.Errorf("%s %q", args[0], r)
		}
		return r, nil
	}
}

func key(i int) string { return "trackbench:{" + strconv.Itoa(i%64) + "}" + strconv.Itoa(i) }

func run() error {
	setup, err := dial()
	if err != nil {
		return err
	}
	for i := range *keyCount {
		if _, err := setup.do(nil, "SET", key(i), "v"); err != nil {
			return err
		}
	}
	var gets, pushes atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(*duration)
	errs := make(chan error, *clients+1)
	for range *clients {
		c, err := dial()
		if err != nil {
			return err
		}
		steps := [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}}
		if !*track {
			steps = steps[:1]
		}
		for _, step := range steps {
			if _, err := c.do(nil, step...); err != nil {
				return err
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.nc.Close()
			var n, p int64
			for time.Now().Before(stop) {
				if _, err := c.do(&p, "GET", key(rand.IntN(*keyCount))); err != nil {
					errs <- err
					return
				}
				n++
			}
			gets.Add(n)
			pushes.Add(p)
		}()
	}
	if *writes > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if _, err := setup.do(nil, "SET", key(rand.IntN(*keyCount)), "w"); err != nil {
					errs <- err
					return
				}
				time.Sleep(*writes)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	secs := duration.Seconds()
	fmt.Printf("RESULT tracking=%v clients=%d gets=%d gets_per_s=%.0f pushes=%d\n", *track, *clients, gets.Load(), float64(gets.Load())/secs, pushes.Load())
	return nil
}
