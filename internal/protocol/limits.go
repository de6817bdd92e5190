package protocol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// OutputLimit is Redis's client-output-buffer-limit for one class of
// clients: a client whose output buffer (reply bytes produced for it and not
// yet written to its socket) exceeds Hard, or stays above Soft for longer
// than SoftFor, is disconnected. Zero turns a limit off.
type OutputLimit struct {
	Hard    int64
	Soft    int64
	SoftFor time.Duration
}

// Redis's defaults: no limit for normal clients; subscribers 32mb hard,
// 8mb for 60 seconds soft.
var (
	DefaultNormalOutput = OutputLimit{}
	DefaultPubSubOutput = OutputLimit{Hard: 32 << 20, Soft: 8 << 20, SoftFor: 60 * time.Second}
)

// String renders l as Redis's CONFIG GET does (bytes, seconds).
func (l OutputLimit) String() string {
	return fmt.Sprintf("%d %d %d", l.Hard, l.Soft, int64(l.SoftFor/time.Second))
}

// ParseOutputLimits applies a client-output-buffer-limit setting in Redis's
// syntax, "class hard soft seconds" repeated (semicolons may separate the
// groups), to normal and pubsub. Redis's replica class is accepted and has
// no effect: fenceproxy has no replicas among its clients. The error texts
// are Redis's.
func ParseOutputLimits(s string, normal, pubsub *OutputLimit) error {
	f := strings.Fields(strings.ReplaceAll(s, ";", " "))
	if len(f) == 0 || len(f)%4 != 0 {
		//lint:ignore ST1005 Redis's own text for this setting, kept word for word
		return errors.New("Wrong number of arguments in buffer limit configuration.")
	}
	for i := 0; i < len(f); i += 4 {
		var dst *OutputLimit
		switch strings.ToLower(f[i]) {
		case "normal":
			dst = normal
		case "pubsub":
			dst = pubsub
		case "replica", "slave":
			dst = new(OutputLimit)
		default:
			//lint:ignore ST1005 Redis's own text
			return errors.New("Invalid client class specified in buffer limit configuration.")
		}
		hard, err1 := ParseMemory(f[i+1])
		soft, err2 := ParseMemory(f[i+2])
		secs, err3 := strconv.ParseInt(f[i+3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || secs < 0 || secs > 1<<31 {
			//lint:ignore ST1005 Redis's own text
			return errors.New("Error in hard, soft or soft_seconds setting in buffer limit configuration.")
		}
		*dst = OutputLimit{Hard: hard, Soft: soft, SoftFor: time.Duration(secs) * time.Second}
	}
	return nil
}

// ParseMemory parses a byte count the way Redis's configuration does
// (memtoull): digits and an optional case-insensitive unit, b, k (1000),
// kb (1024), m, mb, g, gb.
func ParseMemory(s string) (int64, error) {
	digits := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.ToLower(s[len(digits):])
	mul := map[string]int64{"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000 * 1000, "mb": 1024 * 1024,
		"g": 1000 * 1000 * 1000, "gb": 1024 * 1024 * 1024}[unit]
	n, err := strconv.ParseUint(digits, 10, 63)
	if mul == 0 || err != nil || int64(n) > (1<<63-1)/mul {
		return 0, fmt.Errorf("%q is not a memory size (digits and an optional unit: b, k, kb, m, mb, g, gb)", s)
	}
	return int64(n) * mul, nil
}

// Why the server closed a client, as counted by Server.OnLimitClose.
const (
	CloseOutputNormal = "output-buffer-normal"
	CloseOutputPubSub = "output-buffer-pubsub"
	CloseQueryBuffer  = "query-buffer"
	CloseIdle         = "idle-timeout"
)

// errOutputLimit ends a connection whose output buffer went over a limit.
type errOutputLimit struct {
	class, which string
	bytes        int64
}

func (e *errOutputLimit) Error() string {
	return fmt.Sprintf("protocol: %s output buffer over its %s limit (%d bytes)", e.class, e.which, e.bytes)
}

// overBuffer is Redis's checkClientOutputBufferLimits for one client's
// queued output: past the hard limit at once, past the soft limit once the
// buffer has stayed over it for more than SoftFor, as seen at successive
// checks (since is when it went over, zero while under).
type overBuffer struct{ since time.Time }

// check is the limit class's verdict on pending bytes, nil while within.
func (b *overBuffer) check(l OutputLimit, class string, pending int64) *errOutputLimit {
	if l.Hard > 0 && pending > l.Hard {
		return &errOutputLimit{class, "hard", pending}
	}
	if l.Soft > 0 && pending > l.Soft {
		now := time.Now()
		if b.since.IsZero() {
			b.since = now
		} else if now.Sub(b.since) > l.SoftFor {
			return &errOutputLimit{class, "soft", pending}
		}
	} else {
		b.since = time.Time{}
	}
	return nil
}
