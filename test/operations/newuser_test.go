package operations

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// What a new user trips over on a first try (issue 25, item 6).

// TestTTLTooShortSaysSo: a ttl-ms no grant or renewal could ever be
// replied with (1 ms: less than Redlock's drift allowance) is refused with
// -ERR saying it is too short and naming the shortest that can be granted.
// Before, it was granted, undone and answered "-TRYAGAIN ... retry", which
// no retry could change. A ttl that can be granted is still granted.
func TestTTLTooShortSaysSo(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	for _, args := range [][]string{
		{"LOCK.ACQUIRE", "r", "o", "1"},
		{"LOCK.RENEW", "r", "o", "1"},
	} {
		got := string(c.Do(args...))
		if !strings.HasPrefix(got, "-ERR") || !strings.Contains(got, "too short") || !strings.Contains(got, "shortest ttl that can be granted is") {
			t.Errorf("%s = %q, want -ERR saying the ttl is too short and naming the shortest", testenv.ShowCommand(args), got)
		}
	}
	if got := c.Do("LOCK.ACQUIRE", "r", "o", "60000"); got[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE r o 60000 after the refusals = %q, want a token", got)
	}
	if got := c.Do("LOCK.RENEW", "r", "o", "60000"); got[0] != ':' {
		t.Fatalf("LOCK.RENEW r o 60000 = %q, want the token", got)
	}
}
