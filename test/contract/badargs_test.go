package contract_test

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestBadArguments: "Bad input gets a clear error, never a crash, a hang, or
// a lost lock." Every request below must be answered with -ERR, leave the
// connection usable (PING answers PONG) and leave the lock as it was.
func TestBadArguments(t *testing.T) {
	e := startEnv(t, 0)
	c := e.dial(t)
	const (
		r      = "bad-args/held"
		holder = "holder"
	)
	tok := token(t, c, "LOCK.ACQUIRE", r, holder, "600000")
	free := "bad-args/free"
	freeTok := token(t, c, "LOCK.ACQUIRE", free, holder, "600000")
	expect(t, c, replyOne, "LOCK.RELEASE", free, holder)

	res513 := strings.Repeat("r", 513)
	own257 := strings.Repeat("o", 257)
	const overflow = "99999999999999999999"
	const aboveMaxTTL = "2592000001" // 30 days + 1ms
	const aboveMaxWait = "600001"    // 10 minutes + 1ms

	// Each entry must be rejected with -ERR.
	rejected := [][]string{
		// Arity.
		{"LOCK.ACQUIRE"},
		{"LOCK.ACQUIRE", r},
		{"LOCK.ACQUIRE", r, "bob"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT", "100", "extra"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT", "100", "WAIT", "100"},
		{"LOCK.RENEW"},
		{"LOCK.RENEW", r},
		{"LOCK.RENEW", r, holder},
		{"LOCK.RENEW", r, holder, "1000", "extra"},
		{"LOCK.RELEASE"},
		{"LOCK.RELEASE", r},
		{"LOCK.RELEASE", r, holder, "extra"},
		{"FENCE.CHECK"},
		{"FENCE.CHECK", r},
		{"FENCE.CHECK", r, "1", "extra"},
		{"LOCK.INFO"},
		{"LOCK.INFO", r, "extra"},

		// ttl-ms: non-integer, zero, negative, overflowing, above the maximum.
		{"LOCK.ACQUIRE", r, holder, "abc"},
		{"LOCK.ACQUIRE", r, holder, "0"},
		{"LOCK.ACQUIRE", r, holder, "-1"},
		{"LOCK.ACQUIRE", r, holder, "-600000"},
		{"LOCK.ACQUIRE", r, holder, overflow},
		{"LOCK.ACQUIRE", r, holder, "-" + overflow},
		{"LOCK.ACQUIRE", r, holder, aboveMaxTTL},
		{"LOCK.ACQUIRE", r, holder, "1.5"},
		{"LOCK.ACQUIRE", r, holder, "1e3"},
		{"LOCK.ACQUIRE", r, holder, ""},
		{"LOCK.ACQUIRE", r, holder, " 1000"},
		{"LOCK.ACQUIRE", r, holder, "1000 "},
		{"LOCK.ACQUIRE", r, holder, "0x10"},
		{"LOCK.ACQUIRE", free, "bob", "0"},
		{"LOCK.ACQUIRE", free, "bob", overflow},
		{"LOCK.RENEW", r, holder, "abc"},
		{"LOCK.RENEW", r, holder, "0"},
		{"LOCK.RENEW", r, holder, "-1"},
		{"LOCK.RENEW", r, holder, overflow},
		{"LOCK.RENEW", r, holder, aboveMaxTTL},
		{"LOCK.RENEW", r, holder, ""},

		// Empty and oversized resource and owner.
		{"LOCK.ACQUIRE", "", holder, "1000"},
		{"LOCK.ACQUIRE", res513, holder, "1000"},
		{"LOCK.ACQUIRE", r, "", "1000"},
		{"LOCK.ACQUIRE", r, own257, "1000"},
		{"LOCK.ACQUIRE", free, "", "1000"},
		{"LOCK.ACQUIRE", free, own257, "1000"},
		{"LOCK.RENEW", "", holder, "1000"},
		{"LOCK.RENEW", res513, holder, "1000"},
		{"LOCK.RENEW", r, "", "1000"},
		{"LOCK.RENEW", r, own257, "1000"},
		{"LOCK.RELEASE", "", holder},
		{"LOCK.RELEASE", res513, holder},
		{"LOCK.RELEASE", r, ""},
		{"LOCK.RELEASE", r, own257},
		{"FENCE.CHECK", "", "1"},
		{"FENCE.CHECK", res513, "1"},
		{"LOCK.INFO", ""},
		{"LOCK.INFO", res513},

		// WAIT: bad timeout or a wrong keyword.
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT", "abc"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT", "-1"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT", overflow},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT", aboveMaxWait},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT", "1.5"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAIT", ""},
		{"LOCK.ACQUIRE", r, "bob", "1000", "WAITX", "100"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "NOWAIT", "100"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "", "100"},
		{"LOCK.ACQUIRE", r, "bob", "1000", "100", "WAIT"},
		{"LOCK.ACQUIRE", free, "bob", "1000", "WAITX", "100"},
		{"LOCK.ACQUIRE", free, "bob", "1000", "WAIT", "-1"},
		{"LOCK.ACQUIRE", r, holder, "1000", "TIMEOUT", "100"},
	}

	for _, args := range rejected {
		before := info(t, c, r)
		expectErr(t, c, "-ERR", args...)
		expect(t, c, replyPong, "PING")
		after := info(t, c, r)
		if string(after.Owner) != holder || after.Token != tok || after.TTL <= 0 || after.TTL > before.TTL {
			t.Fatalf("after the rejected %s: LOCK.INFO %q is %q, want owner %q, token %d and the lease not re-armed (ttl-ms was %d)",
				testenv.ShowCommand(args), r, after.Raw, holder, tok, before.TTL)
		}
		li := info(t, c, free)
		if li.OwnerRaw != replyNull || li.Token != freeTok {
			t.Fatalf("after the rejected %s: LOCK.INFO %q is %q, want still free with token %d", testenv.ShowCommand(args), free, li.Raw, freeTok)
		}
	}
	expect(t, c, replyOne, "FENCE.CHECK", r, itoa(tok))
	expect(t, c, replyOne, "FENCE.CHECK", free, itoa(freeTok))

	// The bounds themselves are accepted (checks the rejections above are
	// off by nothing): 512-byte resource, 256-byte owner, the maximum
	// ttl-ms, WAIT 0. A ttl-ms too short for any reply to leave the drift
	// allowance and safety margin (1 ms) is refused -ERR, naming the
	// shortest that can be granted; that one is accepted: granted, or
	// answered -TRYAGAIN when its reply was late (guarantee 5), never -ERR.
	r512, o256 := strings.Repeat("r", 512), strings.Repeat("o", 256)
	t512 := token(t, c, "LOCK.ACQUIRE", r512, o256, "2592000000")
	expectHeld(t, c, r512, o256, t512)
	expect(t, c, replyOne, "LOCK.RELEASE", r512, o256)
	tooShort := expectErr(t, c, "-ERR", "LOCK.ACQUIRE", "bad-args/one-ms", "o", "1", "WAIT", "0")
	_, rest, _ := strings.Cut(tooShort, "the shortest ttl that can be granted is ")
	minTTL, ok := testenv.ParseInt([]byte(":" + strings.Fields(rest + " x")[0] + "\r\n"))
	if !strings.Contains(tooShort, "too short") || !ok || minTTL < 2 {
		t.Fatalf("ttl-ms 1: %q, want -ERR saying it is too short and naming the shortest ttl that can be granted", tooShort)
	}
	if got := c.Do("LOCK.ACQUIRE", "bad-args/min-ttl", "o", itoa(minTTL), "WAIT", "0"); got[0] != ':' && !strings.HasPrefix(string(got), "-TRYAGAIN") {
		t.Fatalf("LOCK.ACQUIRE with the shortest ttl-ms %d = %q, want a token or -TRYAGAIN", minTTL, got)
	}

	// A pipeline mixing bad and good requests is answered in order, and the
	// connection stays usable.
	c.Send("LOCK.ACQUIRE", r, holder, "0")
	c.Send("LOCK.INFO", "")
	c.Send("FENCE.CHECK", r, itoa(tok))
	c.Send("LOCK.RELEASE", r, "")
	c.Send("PING")
	c.Flush()
	for i, want := range []string{"-ERR", "-ERR", replyOne, "-ERR", replyPong} {
		got, err := c.ReadReply()
		if err != nil || !strings.HasPrefix(string(got), want) {
			t.Fatalf("pipelined bad/good requests, reply %d: %q (err %v), want %q…", i, got, err, want)
		}
	}
	expectHeld(t, c, r, holder, tok)
	expectPing(t, e.proxy.Addr)
}
