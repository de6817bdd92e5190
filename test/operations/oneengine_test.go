package operations

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// TestClientStaysOnTheServeLoop: a client that sends, between ordinary
// requests, what the serve loop's thread does not answer at once (the
// proxy's INFO, put together on a worker; CLIENT LIST; CLIENT TRACKING ON
// over RESP3 and AUTH as another Redis user, each with a connection of its
// own dialled off the loop)
// stays on the loop for its whole life: the same
// socket in CLIENT LIST (fd), counted in INFO fenceproxy's loop_clients,
// with every reply in order. Another client (the observer) looks, so
// that the subject sends nothing but its own requests. (Before, the
// subject left the loop for a goroutine at each of them: a dup of its
// socket, and uncounted until it came back.)
func TestClientStaysOnTheServeLoop(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	admin := testenv.Dial(t, redis.Addr)
	admin.Do("ACL", "SETUSER", "other", "on", ">otherpw", "~*", "&*", "+@all")
	admin.Do("SET", "k", "v")
	admin.Close()
	for _, tc := range []struct {
		name  string
		setup [][]string // before the subject's fd is taken
		steps [][]string // each answered with want's prefix
		want  []string
	}{
		{"INFO", nil, [][]string{{"INFO", "fenceproxy"}}, []string{"$"}},
		{"CLIENT LIST", nil, [][]string{{"CLIENT", "LIST"}}, []string{"$"}},
		{"CLIENT TRACKING ON over RESP3", [][]string{{"HELLO", "3"}}, [][]string{{"CLIENT", "TRACKING", "ON"}}, []string{"+OK"}},
		{"AUTH as another Redis user", nil, [][]string{{"AUTH", "other", "otherpw"}}, []string{"+OK"}},
		{"all of them, pipelined", [][]string{{"HELLO", "3"}},
			[][]string{{"GET", "k"}, {"INFO", "fenceproxy"}, {"AUTH", "other", "otherpw"}, {"CLIENT", "LIST"}, {"CLIENT", "TRACKING", "ON"}, {"ECHO", "e"}},
			[]string{"$1\r\nv", "$", "+OK", "$", "+OK", "$1\r\ne"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr})
			subject := testenv.Dial(t, proxy.Addr)
			defer subject.Close()
			observer := testenv.Dial(t, proxy.Addr)
			defer observer.Close()
			do := func(want string, args ...string) {
				t.Helper()
				if got := string(subject.Do(args...)); !strings.HasPrefix(got, want) {
					t.Fatalf("%s: %q; want %q...", strings.Join(args, " "), got, want)
				}
			}
			do("+OK", "CLIENT", "SETNAME", "subject")
			for _, args := range tc.setup {
				subject.Do(args...)
			}
			do("$1\r\nv", "GET", "k")
			before := fdOf(t, observer)
			for _, args := range tc.steps {
				subject.Send(args...)
			}
			subject.Flush()
			for i, want := range tc.want {
				if got, err := subject.ReadReply(); err != nil || !strings.HasPrefix(string(got), want) {
					t.Fatalf("reply to %s: %q, %v; want %q...", strings.Join(tc.steps[i], " "), got, err, want)
				}
			}
			do("$1\r\nv", "GET", "k")
			if after := fdOf(t, observer); after != before {
				t.Errorf("after %s: the subject's fd in CLIENT LIST is %s, was %s (it moved off the loop)", tc.name, after, before)
			}
			info := string(observer.Do("INFO", "fenceproxy"))
			if !strings.Contains(info, "loop_clients:2\r\n") {
				t.Errorf("after %s: INFO fenceproxy does not count both clients on the loop (want loop_clients:2):\n%s", tc.name, info)
			}
		})
	}
}

var subjectFD = regexp.MustCompile(`\bfd=(\d+)\b[^\n]*\bname=subject\b|\bname=subject\b[^\n]*\bfd=(\d+)\b`)

// fdOf is the fd CLIENT LIST shows for the client named subject.
func fdOf(t *testing.T, observer *testenv.Conn) string {
	t.Helper()
	list := string(observer.Do("CLIENT", "LIST"))
	m := subjectFD.FindStringSubmatch(list)
	if m == nil {
		t.Fatalf("CLIENT LIST has no client named subject:\n%s", list)
	}
	return m[1] + m[2]
}

// TestGoroutineDetoursCounted: INFO fenceproxy's goroutine_detours counts
// the requests served on a goroutine detour. A lock cycle with its fence
// checks, LOCK.INFO and INFO itself leave it as it was; so do a tracking
// client (HELLO 3, CLIENT TRACKING ON, a read, another client's write of
// what it read: its invalidation push, relayed from its connection of its
// own, which the loop serves), a client of another Redis user (AUTH,
// its requests on its own connection as that user) and CLIENT KILL USER
// (Redis asked off the loop), all on the loop now; so do SUBSCRIBE,
// SSUBSCRIBE and a tracking client (with its transaction) in front of a
// Redis Cluster (their connections dialled off the loop). A tier node's
// lock request still takes a detour and moves it.
func TestGoroutineDetoursCounted(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	admin := testenv.Dial(t, redis.Addr)
	admin.Do("ACL", "SETUSER", "other", "on", ">otherpw", "~*", "&*", "+@all")
	admin.Close()
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr})
	c := testenv.Dial(t, proxy.Addr)
	detours := func() string {
		t.Helper()
		n := upstream.InfoField(string(c.Do("INFO", "fenceproxy")), "goroutine_detours")
		if n == "" {
			t.Fatal("INFO fenceproxy has no goroutine_detours")
		}
		return n
	}
	unmoved := func(before, what string) {
		t.Helper()
		if after := detours(); after != before {
			t.Fatalf("goroutine_detours went from %s to %s over %s, served on the loop", before, after, what)
		}
	}
	before := detours()
	tok, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "d", "o", "10000"))
	if !ok || tok <= 0 {
		t.Fatal("LOCK.ACQUIRE: no token")
	}
	for _, args := range [][]string{{"FENCE.CHECK", "d", strconv.FormatInt(tok, 10)}, {"LOCK.INFO", "d"}, {"LOCK.RELEASE", "d", "o"}} {
		if r := string(c.Do(args...)); strings.HasPrefix(r, "-") {
			t.Fatalf("%s: %q", strings.Join(args, " "), r)
		}
	}
	unmoved(before, "a lock cycle")

	tracker := testenv.Dial(t, proxy.Addr)
	defer tracker.Close()
	for _, step := range [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}, {"SET", "cached", "1"}, {"GET", "cached"}} {
		if r := string(tracker.Do(step...)); strings.HasPrefix(r, "-") {
			t.Fatalf("tracking client: %s: %q", strings.Join(step, " "), r)
		}
	}
	if r := string(c.Do("SET", "cached", "2")); r != "+OK\r\n" {
		t.Fatalf("SET cached 2 = %q", r)
	}
	// The invalidation comes as a push ahead of the reply to the
	// tracker's next request.
	tracker.Send("PING")
	tracker.Flush()
	push, err := tracker.ReadReply()
	if err != nil || !strings.HasPrefix(string(push), ">2\r\n$10\r\ninvalidate\r\n") || !strings.Contains(string(push), "cached") {
		t.Fatalf("tracking client: %q, %v; want the invalidation push of cached", push, err)
	}
	if r, err := tracker.ReadReply(); err != nil || string(r) != "+PONG\r\n" {
		t.Fatalf("tracking client: PING = %q, %v", r, err)
	}
	unmoved(before, "a tracking client's requests and push")

	user := testenv.Dial(t, proxy.Addr)
	defer user.Close()
	for _, step := range [][]string{{"AUTH", "other", "otherpw"}, {"ACL", "WHOAMI"}, {"GET", "cached"}} {
		if r := string(user.Do(step...)); strings.HasPrefix(r, "-") {
			t.Fatalf("client of another user: %s: %q", strings.Join(step, " "), r)
		}
	}
	if r := string(user.Do("ACL", "WHOAMI")); r != "$5\r\nother\r\n" {
		t.Fatalf("ACL WHOAMI as other = %q", r)
	}
	unmoved(before, "a client of another Redis user")

	if r := string(c.Do("CLIENT", "KILL", "USER", "other")); r != ":1\r\n" {
		t.Fatalf("CLIENT KILL USER other = %q, want :1 (the client of other)", r)
	}
	if r := string(c.Do("CLIENT", "KILL", "USER", "nobody")); r != "-ERR No such user 'nobody'\r\n" {
		t.Fatalf("CLIENT KILL USER nobody = %q", r)
	}
	unmoved(before, "CLIENT KILL USER")

	cluster := testenv.StartCluster(t, testenv.ClusterOptions{})
	front := testenv.StartProxy(t, testenv.ProxyOptions{Backend: cluster.Masters[0].Addr})
	sub, observer := testenv.Dial(t, front.Addr), testenv.Dial(t, front.Addr)
	at := func() string {
		n := upstream.InfoField(string(observer.Do("INFO", "fenceproxy")), "goroutine_detours")
		if n == "" {
			t.Fatal("INFO fenceproxy has no goroutine_detours")
		}
		return n
	}
	was := at()
	if r := string(sub.Do("SUBSCRIBE", "ch")); !strings.HasPrefix(r, "*3\r\n$9\r\nsubscribe\r\n") {
		t.Fatalf("SUBSCRIBE ch in front of a Redis Cluster = %q", r)
	}
	if r := string(sub.Do("SSUBSCRIBE", "{s}ch")); !strings.HasPrefix(r, "*3\r\n$10\r\nssubscribe\r\n") {
		t.Fatalf("SSUBSCRIBE {s}ch in front of a Redis Cluster = %q", r)
	}
	if now := at(); now != was {
		t.Fatalf("goroutine_detours went from %s to %s over SUBSCRIBE and SSUBSCRIBE in front of a Redis Cluster, served on the loop", was, now)
	}
	ctracker := testenv.Dial(t, front.Addr)
	for _, step := range [][]string{{"CLIENT", "TRACKING", "ON"}, {"GET", "{a}k"}, {"CLIENT", "TRACKINGINFO"}, {"MULTI"}, {"SET", "{a}k", "1"}, {"EXEC"}} {
		if r := string(ctracker.Do(step...)); strings.HasPrefix(r, "-") {
			t.Fatalf("tracking client in front of a Redis Cluster: %s: %q", strings.Join(step, " "), r)
		}
	}
	if now := at(); now != was {
		t.Fatalf("goroutine_detours went from %s to %s over a tracking client in front of a Redis Cluster and its transaction, served on the loop", was, now)
	}

	// A tier node's lock request still takes a detour (lockcmd's
	// LeaseOnLoop says why) and moves it.
	tier := testenv.StartTier(t, testenv.TierOptions{Backend: testenv.StartRedis(t, testenv.RedisOptions{}).Addr})
	node := testenv.Dial(t, tier.Nodes[tier.Leader(t)].Addr)
	tierDetours := func() string { return upstream.InfoField(string(node.Do("INFO", "fenceproxy")), "goroutine_detours") }
	was = tierDetours()
	// A new leader answers -TRYAGAIN until the backend confirms it as the
	// token authority: each try is a detour too.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r := node.Do("LOCK.ACQUIRE", "tiered", "o", "10000")
		if strings.HasPrefix(string(r), ":") {
			break
		}
		if !strings.HasPrefix(string(r), "-TRYAGAIN") || time.Now().After(deadline) {
			t.Fatalf("LOCK.ACQUIRE on the tier's leader = %q, want a token", r)
		}
	}
	if now := tierDetours(); now == was {
		t.Fatalf("goroutine_detours stayed %s over a tier node's LOCK.ACQUIRE, a detour", was)
	}
}
