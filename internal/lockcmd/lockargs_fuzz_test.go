package lockcmd

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzLockArgs(f *testing.F) {
	f.Add([]byte("res"), []byte("owner"), []byte("1000"), []byte("0"), uint8(3))
	f.Add([]byte(""), []byte("owner"), []byte("1000"), []byte("5"), uint8(3))
	f.Add([]byte("r"), []byte(""), []byte("1"), []byte("600000"), uint8(3))
	f.Add([]byte("r"), []byte("o"), []byte("0"), []byte("600001"), uint8(3))
	f.Add([]byte("r"), []byte("o"), []byte("2592000000"), []byte("-1"), uint8(3))
	f.Add([]byte("r"), []byte("o"), []byte("2592000001"), []byte("+5"), uint8(3))
	f.Add([]byte("r"), []byte("o"), []byte("-1"), []byte(" 5"), uint8(2))
	f.Add([]byte("r"), []byte("o"), []byte("9223372036854775807"), []byte("9223372036854775808"), uint8(1))
	f.Add([]byte("r"), []byte("o"), []byte("007"), []byte("-0"), uint8(3))
	f.Add([]byte(strings.Repeat("r", MaxResourceLen+1)), []byte(strings.Repeat("o", MaxOwnerLen+1)), []byte("1e3"), []byte("0x10"), uint8(3))
	f.Fuzz(func(t *testing.T, resource, owner, ttl, wait []byte, n uint8) {
		// parseLock sees what the table's arity lets through: at least the
		// resource, at most resource owner ttl-ms.
		args := [][]byte{[]byte("lock.acquire"), resource, owner, ttl}[:2+int(n%3)]
		a, msg := parseLock(args)
		if msg != "" {
			if !strings.HasPrefix(msg, "ERR ") {
				t.Fatalf("error %q does not start with ERR", msg)
			}
		} else {
			if len(a.resource) == 0 || len(a.resource) > MaxResourceLen || a.resource != string(resource) {
				t.Fatalf("accepted resource %q (%d bytes)", a.resource, len(a.resource))
			}
			if len(args) >= 3 && (len(a.owner) == 0 || len(a.owner) > MaxOwnerLen || a.owner != string(owner)) {
				t.Fatalf("accepted owner %q (%d bytes)", a.owner, len(a.owner))
			}
			if len(args) >= 4 {
				checkMillis(t, ttl, a.ttl, 1, MaxTTL)
			}
		}

		d, msg := parseMillis(wait, "WAIT timeout-ms", 0, MaxWait)
		if msg == "" {
			checkMillis(t, wait, d, 0, MaxWait)
		} else if d != 0 || !strings.HasPrefix(msg, "ERR WAIT timeout-ms must be an integer from 0 to ") {
			t.Fatalf("refused %q with %v, %q", wait, d, msg)
		}
	})
}

// checkMillis: an accepted value is within [lo ms, hi], a whole number of
// milliseconds, and the number written in b.
func checkMillis(t *testing.T, b []byte, d time.Duration, lo int64, hi time.Duration) {
	t.Helper()
	if d < time.Duration(lo)*time.Millisecond || d > hi || d%time.Millisecond != 0 {
		t.Fatalf("%q accepted as %v, outside [%dms, %v]", b, d, lo, hi)
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || time.Duration(n)*time.Millisecond != d {
		t.Fatalf("%q accepted as %v", b, d)
	}
}
