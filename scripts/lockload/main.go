// Command lockload locks many distinct resources once, as fast as it can, to
// see what a large resource count costs fenceproxy: many connections, each
// sending LOCK.ACQUIRE in pipelined batches with a short lease, never the
// same resource twice. Then it reads the proxy's resident memory.
//
//	go run ./scripts/lockload -addr 127.0.0.1:7379 -pid PID [-n 10000000]
//	    [-conns 64] [-pipeline 256] [-ttl-ms 2000]
//
// It prints one RESULT line: resources=N granted=… refused=… errors=…
// seconds=… per_sec=… rss_mib=… (VmRSS after the load) hwm_mib=… (VmHWM)
// and, after -settle, rss_settled_mib=….
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/scripts/internal/procmem"
)

type config struct {
	addr     string
	pid      int
	n        int64
	conns    int
	pipeline int
	ttlMs    int
	prefix   string
	spread   bool
	settle   time.Duration
	timeout  time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.addr, "addr", "127.0.0.1:7379", "`host:port` of fenceproxy")
	flag.IntVar(&c.pid, "pid", 0, "fenceproxy's process id, for its memory (0: not read)")
	flag.Int64Var(&c.n, "n", 10_000_000, "distinct resources to lock")
	flag.IntVar(&c.conns, "conns", 64, "connections")
	flag.IntVar(&c.pipeline, "pipeline", 256, "LOCK.ACQUIRE commands per write")
	flag.IntVar(&c.ttlMs, "ttl-ms", 2000, "lease of each lock")
	flag.StringVar(&c.prefix, "prefix", "", "resource name prefix (default: unique per run)")
	flag.BoolVar(&c.spread, "spread", false, "start each resource name with 4 hex digits of a hash of its number, so that the names spread over the key space as lockbench -spread's do")
	flag.DurationVar(&c.settle, "settle", 5*time.Second, "wait after the load before reading memory again")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(&c); err != nil {
		fmt.Fprintf(os.Stderr, "lockload: %v\n", err)
		os.Exit(1)
	}
}

// spreadOf is 16 bits of a multiplicative hash of i (lockbench's too).
func spreadOf(i uint64) uint64 { return (i * 0x9E3779B97F4A7C15) >> 48 }

func run(c *config) error {
	if c.n < 1 || c.conns < 1 || c.pipeline < 1 || c.ttlMs < 1 {
		return errors.New("-n, -conns, -pipeline and -ttl-ms must be positive")
	}
	if c.prefix == "" {
		c.prefix = fmt.Sprintf("ld:%x:", time.Now().UnixNano()&0xffffffffff)
	}
	var (
		next             atomic.Int64 // next resource index to hand out
		granted, refused atomic.Int64
		errs             atomic.Int64
		firstErr         atomic.Value
		wg               sync.WaitGroup
	)
	deadline := time.Now().Add(c.timeout)
	conns := make([]net.Conn, c.conns)
	for i := range conns {
		conn, err := net.DialTimeout("tcp", c.addr, 10*time.Second)
		if err != nil {
			for _, x := range conns[:i] {
				_ = x.Close()
			}
			return err
		}
		conns[i] = conn
	}
	t0 := time.Now()
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			_ = conn.SetDeadline(deadline)
			owner := "lockload-" + strconv.Itoa(i)
			ttl := strconv.Itoa(c.ttlMs)
			r := bufio.NewReaderSize(conn, 64<<10)
			buf := make([]byte, 0, c.pipeline*96)
			for {
				from := next.Add(int64(c.pipeline)) - int64(c.pipeline)
				if from >= c.n {
					return
				}
				to := min(from+int64(c.pipeline), c.n)
				buf = buf[:0]
				for k := from; k < to; k++ {
					name := c.prefix + strconv.FormatInt(k, 36)
					if c.spread {
						name = fmt.Sprintf("%04x:%s", spreadOf(uint64(k)), name)
					}
					buf = appendCmd(buf, "LOCK.ACQUIRE", name, owner, ttl)
				}
				if _, err := conn.Write(buf); err != nil {
					errs.Add(to - from)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				for k := from; k < to; k++ {
					kind, msg, err := readReply(r)
					switch {
					case err != nil:
						errs.Add(to - k)
						firstErr.CompareAndSwap(nil, err.Error())
						return
					case kind == ':':
						granted.Add(1)
					case kind == '$' && msg == "-1":
						refused.Add(1)
					default:
						errs.Add(1)
						firstErr.CompareAndSwap(nil, string(kind)+msg)
					}
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	done := granted.Load() + refused.Load()
	var b strings.Builder
	fmt.Fprintf(&b, "RESULT resources=%d granted=%d refused=%d errors=%d seconds=%.1f per_sec=%.0f",
		c.n, granted.Load(), refused.Load(), errs.Load(), secs, float64(done)/secs)
	if c.pid > 0 {
		cur, hwm, err := procmem.RSS(c.pid)
		if err != nil {
			return err
		}
		time.Sleep(c.settle)
		settled, _, err := procmem.RSS(c.pid)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, " rss_mib=%.1f hwm_mib=%.1f rss_settled_mib=%.1f", procmem.MiB(cur), procmem.MiB(hwm), procmem.MiB(settled))
	}
	fmt.Println(b.String())
	if e := firstErr.Load(); e != nil {
		fmt.Printf("ERROR_SAMPLE %s\n", e)
	}
	return nil
}

func appendCmd(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// readReply reads one reply of the kinds LOCK.ACQUIRE gives: an integer, a
// null bulk, or an error (returned as kind '-' with its text). A non-null bulk
// string is read whole and returned as kind '$'.
func readReply(r *bufio.Reader) (kind byte, rest string, err error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, "", err
	}
	if len(line) < 3 {
		return 0, "", fmt.Errorf("short reply line %q", line)
	}
	kind, rest = line[0], strings.TrimRight(line[1:], "\r\n")
	if kind == '$' && rest != "-1" {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return 0, "", fmt.Errorf("bad bulk length %q", rest)
		}
		if _, err := io.CopyN(io.Discard, r, int64(n)+2); err != nil {
			return 0, "", err
		}
		return kind, "bulk", nil
	}
	return kind, rest, nil
}
