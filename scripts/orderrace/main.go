// Command orderrace counts how often requests that several clients send
// back to back reach Redis in another order than they were sent: the two
// races Redis's own suite trips on through a proxy (docs/compatibility.md,
// "Two clients' requests sent at the same moment").
//
//	go run ./scripts/orderrace -addr 127.0.0.1:7379 [-rounds 100] [-db 9] [-no-first]
//
// Each round opens fresh clients, as the suite's redis_deferring_client
// does (with -db N each first sends SELECT N, else ECHO, and with
// -no-first nothing: its first request then arrives with its connection,
// a race plain Redis loses now and then too), and writes on three sockets
// one after another, not waiting for a reply in between:
//
//   - list: BRPOPLPUSH blist target1 0 (client 1), BRPOPLPUSH blist
//     target2 0 (client 2), LPUSH blist foo (a long-lived client). Redis
//     answers client 1 WRONGTYPE (target1 is a string); if client 2's
//     request got there first, client 1 stays blocked (the suite hangs).
//   - stream: XREADGROUP ... BLOCK 0 (a fresh client), DEL of the stream
//     (the long-lived client). Redis answers the reader that the stream no
//     longer exists; if the DEL got there first, it answers NOGROUP.
//
// It prints one RESULT line: rounds, and for each race how many rounds
// came out otherwise than on Redis. Against a plain Redis both are 0.
// Traffic goes only to -addr; every key is under orderrace:.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

var (
	addr    = flag.String("addr", "127.0.0.1:7379", "`host:port` of the server")
	db      = flag.Int("db", 0, "database each client selects first (0: none sent)")
	wait    = flag.Duration("wait", time.Second, "how long a reply that is due may take before the round counts as blocked")
	noFirst = flag.Bool("no-first", false, "send nothing before the race on a fresh client (the suite's --singledb): its first request may arrive with its connection")
)

func main() {
	rounds := flag.Int("rounds", 100, "rounds of each race")
	flag.Parse()
	ctl, err := dial()
	if err != nil {
		fail(err)
	}
	var listBlocked, streamOtherwise int
	for range *rounds {
		blocked, err := listRound(ctl)
		if err != nil {
			fail(err)
		}
		if blocked {
			listBlocked++
		}
		otherwise, err := streamRound(ctl)
		if err != nil {
			fail(err)
		}
		if otherwise {
			streamOtherwise++
		}
	}
	fmt.Printf("RESULT rounds=%d list_blocked=%d stream_nogroup=%d\n", *rounds, listBlocked, streamOtherwise)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "orderrace:", err)
	os.Exit(1)
}

// client is one connection with its reader.
type client struct {
	nc net.Conn
	rd *bufio.Reader
}

func dial() (*client, error) {
	nc, err := net.Dial("tcp", *addr)
	if err != nil {
		return nil, err
	}
	c := &client{nc: nc, rd: bufio.NewReader(nc)}
	// One round trip first, so that the server has accepted the
	// connection before the race (ECHO: what a proxy answers at once
	// and, with fenceproxy's serve loop, on the loop).
	first := []string{"ECHO", "+OK"}
	if *db != 0 {
		first = []string{"SELECT", fmt.Sprint(*db)}
	} else if *noFirst {
		return c, nil
	}
	if reply, err := c.do(first...); err != nil || reply != "+OK" {
		nc.Close()
		return nil, fmt.Errorf("%s: %q, %v", first[0], reply, err)
	}
	return c, nil
}

func (c *client) send(args ...string) error {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := c.nc.Write(b)
	return err
}

// read reads one reply and gives its first line (a bulk string's or an
// array's first bulk's contents in place of its header), or "" and a
// timeout error if none came within wait.
func (c *client) read() (string, error) {
	c.nc.SetReadDeadline(time.Now().Add(*wait))
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	for line != "" && (line[0] == '*' || line[0] == '$') && line != "*-1" && line != "$-1" {
		if line[0] == '*' {
			// Only the first element matters here; the rest is drained.
			n := 0
			fmt.Sscan(line[1:], &n)
			first, err := c.read()
			for i := 1; i < n && err == nil; i++ {
				_, err = c.read()
			}
			return first, err
		}
		if line, err = c.rd.ReadString('\n'); err != nil {
			return "", err
		}
		line = strings.TrimSuffix(line, "\r\n")
	}
	return line, nil
}

func (c *client) do(args ...string) (string, error) {
	if err := c.send(args...); err != nil {
		return "", err
	}
	return c.read()
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func listRound(ctl *client) (blocked bool, err error) {
	rd1, err := dial()
	if err != nil {
		return false, err
	}
	defer rd1.nc.Close()
	rd2, err := dial()
	if err != nil {
		return false, err
	}
	defer rd2.nc.Close()
	// As the suite's test: the clients are opened, then the keys set.
	for _, cmd := range [][]string{{"DEL", "orderrace:blist", "orderrace:target1", "orderrace:target2"}, {"SET", "orderrace:target1", "nolist"}} {
		if _, err := ctl.do(cmd...); err != nil {
			return false, err
		}
	}
	rd1.send("BRPOPLPUSH", "orderrace:blist", "orderrace:target1", "0")
	rd2.send("BRPOPLPUSH", "orderrace:blist", "orderrace:target2", "0")
	ctl.send("LPUSH", "orderrace:blist", "foo")
	if _, err := ctl.read(); err != nil {
		return false, err
	}
	reply, err := rd1.read()
	switch {
	case isTimeout(err):
		// Client 2 took foo first: push another for client 1 so the
		// round ends (and the proxy's connection is given back).
		if _, err := ctl.do("LPUSH", "orderrace:blist", "bar"); err != nil {
			return true, err
		}
		rd1.read()
		rd2.read()
		return true, nil
	case err != nil:
		return false, err
	case !strings.HasPrefix(reply, "-WRONGTYPE"):
		return false, fmt.Errorf("client 1: %q, want WRONGTYPE", reply)
	}
	if reply, err := rd2.read(); err != nil || reply != "foo" {
		return false, fmt.Errorf("client 2: %q, %v; want foo", reply, err)
	}
	return false, nil
}

func streamRound(ctl *client) (otherwise bool, err error) {
	for _, cmd := range [][]string{{"DEL", "orderrace:stream"}, {"XADD", "orderrace:stream", "666", "f", "v"}, {"XGROUP", "CREATE", "orderrace:stream", "g", "$"}} {
		if _, err := ctl.do(cmd...); err != nil {
			return false, err
		}
	}
	rd, err := dial()
	if err != nil {
		return false, err
	}
	defer rd.nc.Close()
	rd.send("XREADGROUP", "GROUP", "g", "Alice", "BLOCK", "0", "STREAMS", "orderrace:stream", ">")
	ctl.send("DEL", "orderrace:stream")
	if _, err := ctl.read(); err != nil {
		return false, err
	}
	reply, err := rd.read()
	switch {
	case err != nil:
		return false, fmt.Errorf("reader: %v", err)
	case strings.Contains(reply, "no longer exists"):
		return false, nil
	case strings.HasPrefix(reply, "-NOGROUP"):
		return true, nil
	}
	return false, fmt.Errorf("reader: %q, want the stream gone or NOGROUP", reply)
}
