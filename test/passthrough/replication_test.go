package passthrough

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// attach sends SYNC to addr as Redis's test suite does
// (attach_to_replication_stream) and reads past the snapshot.
func attach(t *testing.T, addr string) *bufio.Reader {
	t.Helper()
	testenv.Dial(t, addr).Do("CONFIG", "SET", "repl-ping-replica-period", "3600")
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write([]byte("SYNC\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(nc)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("SYNC to %s: %v", addr, err)
		}
		if line == "\n" {
			continue // Redis is preparing the snapshot
		}
		if line[0] != '$' {
			t.Fatalf("SYNC to %s: %q", addr, line)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		if _, err := rd.Discard(n); err != nil {
			t.Fatal(err)
		}
		return rd
	}
}

// streamUntil reads commands from a replication stream up to and including
// SET marker ..., each as one line of its arguments.
func streamUntil(t *testing.T, rd *bufio.Reader) []string {
	t.Helper()
	var cmds []string
	for {
		raw, err := resp.AppendReply(nil, rd)
		if err != nil {
			t.Fatalf("reading the replication stream: %v (after %q)", err, cmds)
		}
		elems, _ := resp.Elements(raw)
		var args []string
		for _, e := range elems {
			b, _ := testenv.ParseBulk(e)
			args = append(args, string(b))
		}
		cmd := strings.Join(args, " ")
		cmds = append(cmds, cmd)
		if strings.HasPrefix(strings.ToLower(cmd), "set marker") {
			return cmds
		}
	}
}

// TestSyncStreamLikeRedis: SYNC through the proxy relays the replication
// stream as Redis sends it to a replica of its own, writes in several
// databases and transactions included, less the token authority's
// heartbeat, which runs meanwhile (unit/type/list, unit/expire without
// --singledb: attach_to_replication_stream, then assert_replication_stream
// of exactly the test's writes). PSYNC is refused; SYNC inside MULTI is
// Redis's business.
func TestSyncStreamLikeRedis(t *testing.T) {
	pr := startPair(t)
	streams := map[string]*bufio.Reader{}
	for _, addr := range []string{pr.Proxy.Addr, pr.B.Addr} {
		streams[addr] = attach(t, addr)
	}
	proxy, direct := pr.conns(t)
	write := func(cmd ...string) { same(t, proxy, direct, cmd...) }
	write("SELECT", "9")
	write("SET", "a", "1")
	heartbeats(t, pr.A.Addr, 2) // Redis wrote the authority's keys, in database 15, twice
	write("MULTI")
	write("INCR", "a")
	write("SELECT", "3")
	write("LPUSH", "l", "x")
	write("EXEC")
	write("GET", "a")
	write("SELECT", "9")
	heartbeats(t, pr.A.Addr, 1)
	write("DEL", "a")
	write("SET", "marker", "done")
	got, want := streamUntil(t, streams[pr.Proxy.Addr]), streamUntil(t, streams[pr.B.Addr])
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replication stream through the proxy:\n %q\nfrom Redis:\n %q", got, want)
	}
	if got := proxy.Do("PSYNC", "?", "-1"); !strings.HasPrefix(string(got), "-ERR fenceproxy: PSYNC is not served") {
		t.Errorf("PSYNC = %q", got)
	}
	pr.alive(t)
}
