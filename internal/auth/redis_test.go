package auth

import (
	"math/rand"
	"os/exec"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestMatchAgainstRedis asks a real redis-server whether each pattern
// admits each key (ACL DRYRUN of GET for a user whose only key pattern it
// is: Redis's own stringmatchlen) and compares with Match: the table above
// and a few thousand random pairs over an alphabet rich in glob syntax.
func TestMatchAgainstRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: install redis-server (every testenv test needs it; scripts/test.sh and CI install it)")
	}
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, r.Addr)
	type pair struct{ pattern, s string }
	var pairs []pair
	for _, gc := range globCases {
		if !strings.Contains(gc.pattern, "\x00") { // ACL SETUSER refuses a NUL
			pairs = append(pairs, pair{gc.pattern, gc.s})
		}
	}
	alphabet := []byte("ab*?[]^-\\/\xff\x80a")
	rng := rand.New(rand.NewSource(1))
	word := func(n int, from []byte) string {
		b := make([]byte, rng.Intn(n+1))
		for i := range b {
			b[i] = from[rng.Intn(len(from))]
		}
		return string(b)
	}
	for range 3000 {
		pairs = append(pairs, pair{word(7, alphabet), word(6, []byte("ab-]^\\/\xff\x80*?["))})
	}
	for range 500 { // ranges over all bytes (signedness)
		lo, hi, c := byte(33+rng.Intn(223)), byte(33+rng.Intn(223)), byte(33+rng.Intn(223)) // no spaces: SETUSER refuses them
		pairs = append(pairs, pair{"[" + string([]byte{lo, '-', hi}) + "]", string([]byte{c})})
	}
	// Pipelined: SETUSER then DRYRUN per pair.
	for i := 0; i < len(pairs); i += 200 {
		batch := pairs[i:min(i+200, len(pairs))]
		for _, p := range batch {
			if p.pattern == "*" {
				continue // Redis reads ~* as allkeys, not as a pattern
			}
			c.Send("ACL", "SETUSER", "globtest", "reset", "on", "nopass", "+@all", "~"+p.pattern)
			c.Send("ACL", "DRYRUN", "globtest", "GET", p.s)
		}
		c.Flush()
		for _, p := range batch {
			if p.pattern == "*" {
				continue
			}
			if rep, err := c.ReadReply(); err != nil || string(rep) != "+OK\r\n" {
				t.Fatalf("ACL SETUSER ~%q: %q %v", p.pattern, rep, err)
			}
			rep, err := c.ReadReply()
			if err != nil {
				t.Fatal(err)
			}
			redis := string(rep) == "+OK\r\n"
			if got := MatchString(p.pattern, p.s); got != redis {
				t.Errorf("Match(%q, %q) = %v, Redis says %v (%q)", p.pattern, p.s, got, redis, rep)
			}
		}
	}
}
