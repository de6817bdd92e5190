package passthrough

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// replyWait bounds each wait for a reply that is due; it only ends a hang.
const replyWait = 5 * time.Second

// step is bytes a client sends and how many replies are due once they are
// in: those of the requests they complete.
type step struct {
	send    string
	replies int
}

// replies reads n replies from c within replyWait each and returns their
// bytes; after names what was sent last, for the error.
func replies(t *testing.T, c *testenv.Conn, n int, who, after string) []byte {
	t.Helper()
	var got []byte
	for i := range n {
		r, err := c.ReadReply()
		if err != nil {
			t.Fatalf("%s, after %s: reply %d of %d not in within %v (%v); got so far %s",
				who, shown(after), i+1, n, replyWait, err, testenv.ShowReply(got))
		}
		got = append(got, r...)
	}
	return got
}

func shown(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q…(%d bytes)", s[:80], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// sameSteps sends steps to the proxy and to Redis B on new connections,
// reading the replies due after each step before sending the next, and
// fails unless both answer the same bytes at each step.
func sameSteps(t *testing.T, pr *pair, steps []step) {
	t.Helper()
	proxy, direct := pr.conns(t)
	proxy.SetTimeout(replyWait)
	direct.SetTimeout(replyWait)
	for _, s := range append(steps, step{"PING\r\n", 1}) {
		direct.WriteRaw([]byte(s.send))
		want := replies(t, direct, s.replies, "redis", s.send)
		proxy.WriteRaw([]byte(s.send))
		got := replies(t, proxy, s.replies, "proxy", s.send)
		if !bytes.Equal(got, want) {
			t.Fatalf("after %s:\n proxy  %s\n redis  %s", shown(s.send), testenv.ShowReply(got), testenv.ShowReply(want))
		}
	}
}

// TestCompleteRequestAnsweredBeforeRest: a complete request followed by
// only part of another (or by an empty line, which Redis skips) is answered
// before the rest is sent, as Redis answers it; then the rest is.
func TestCompleteRequestAnsweredBeforeRest(t *testing.T) {
	pr := startPair(t)
	const big = 1 << 20
	bigSet := string(testenv.AppendCommand(nil, "SET", "trickle", strings.Repeat("v", big)))
	trickle := []step{{"PING\r\n" + bigSet[:32<<10], 1}}
	for at := 32 << 10; at < len(bigSet); at += 64 << 10 {
		s := step{bigSet[at:min(at+64<<10, len(bigSet))], 0}
		if at+64<<10 >= len(bigSet) {
			s.replies = 1
		}
		trickle = append(trickle, s)
	}
	trickle = append(trickle, step{"STRLEN trickle\r\n", 1})
	cases := []struct {
		name  string
		steps []step
	}{
		{"empty line", []step{{"PING\r\n\r\n", 1}, {"ECHO x\r\n", 1}}},
		{"partial inline", []step{{"PING\r\nPI", 1}, {"NG\r\n", 1}}},
		{"multibulk header alone", []step{{"PING\r\n*1\r\n", 1}, {"$4\r\nPING\r\n", 1}}},
		{"multibulk missing an argument", []step{{"PING\r\n*2\r\n$3\r\nGET\r\n", 1}, {"$1\r\nk\r\n", 1}}},
		{"empty lines alone", []step{{"\r\n\r\n\n", 0}}},
		{"blank and empty requests", []step{{"PING\r\n   \r\n*0\r\n*-1\r\n", 1}}},
		{"pipeline then a partial request", []step{{"PING\r\nECHO a\r\n*1\r\n$4\r\nPING\r\nEC", 3}, {"HO b\r\n", 1}}},
		{"big value trickling in", trickle},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { sameSteps(t, pr, tc.steps) })
	}
	pr.alive(t)
}

// splitPieces is a pipeline as its requests, each with the number of
// replies Redis sends for it (0 for what it skips).
var splitPieces = []step{
	{"PING\r\n", 1},
	{"\r\n", 0},
	{"ECHO a\n", 1},
	{"*2\r\n$4\r\nECHO\r\n$4\r\nb\r\nc\r\n", 1},
	{"*0\r\n", 0},
	{"   \r\n", 0},
	{"*3\r\n$3\r\nSET\r\n$5\r\nsplit\r\n$40\r\n" + strings.Repeat("x", 40) + "\r\n", 1},
	{"*-1\r\n", 0},
	{"GET split\r\n", 1},
	{"ECHO \"q u\" 'o'\r\n", 1},
}

// TestSplitPipelineLikeRedis cuts a pipeline at every byte: after the
// first part, the replies to every request it completes must arrive before
// the second part is sent, the same bytes Redis sends; then the rest.
func TestSplitPipelineLikeRedis(t *testing.T) {
	pr := startPair(t)
	var whole string
	for _, p := range splitPieces {
		whole += p.send
	}
	for cut := 1; cut < len(whole); cut++ {
		complete, at := 0, 0
		for _, p := range splitPieces {
			if at += len(p.send); at <= cut {
				complete += p.replies
			}
		}
		total := 0
		for _, p := range splitPieces {
			total += p.replies
		}
		t.Run(fmt.Sprintf("cut at %d", cut), func(t *testing.T) {
			sameSteps(t, pr, []step{{whole[:cut], complete}, {whole[cut:], total - complete}})
		})
		if t.Failed() {
			return // on the first failure: each hang costs replyWait
		}
	}
}

// TestLockGrantNotHeldByTricklingRequest: a LOCK.ACQUIRE followed by the
// start of a 1 MB SET whose value trickles in gets its token before the
// value is in (while its lease runs), then the SET its OK; the token is
// the resource's newest.
func TestLockGrantNotHeldByTricklingRequest(t *testing.T) {
	pr := startPair(t)
	c := testenv.Dial(t, pr.Proxy.Addr)
	c.SetTimeout(replyWait)
	set := testenv.AppendCommand(nil, "SET", "trickle:value", strings.Repeat("v", 1<<20))
	first := append(testenv.AppendCommand(nil, "LOCK.ACQUIRE", "trickle:lock", "owner", "5000"), set[:16<<10]...)
	c.WriteRaw(first)
	token, err := c.ReadReply()
	if err != nil || token[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE with the SET's value still to come: %q, %v (the grant waited for the rest)", token, err)
	}
	for at := 16 << 10; at < len(set); at += 32 << 10 {
		c.WriteRaw(set[at:min(at+32<<10, len(set))])
		time.Sleep(10 * time.Millisecond) // the value trickles in
	}
	if r, err := c.ReadReply(); err != nil || string(r) != "+OK\r\n" {
		t.Fatalf("SET once its value is in: %q, %v", r, err)
	}
	n, _ := testenv.ParseInt(token)
	if r := c.Do("FENCE.CHECK", "trickle:lock", fmt.Sprint(n)); string(r) != ":1\r\n" {
		t.Errorf("FENCE.CHECK of the token granted = %q, want :1", r)
	}
	if r := c.Do("STRLEN", "trickle:value"); string(r) != ":1048576\r\n" {
		t.Errorf("STRLEN of the trickled value = %q", r)
	}
}
