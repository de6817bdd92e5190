package lockcmd

import (
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// What operators see of the lock family: LOCK.INFO's fields beyond the
// contract's four, LOCK.SLOWLOG, and INFO's "# locks" section.

// queueFullReply tells a LOCK.ACQUIRE ... WAIT refused for --max-waiters
// what to do. QUEUEFULL is a code of fenceproxy's own: clients retry BUSY,
// TRYAGAIN and LOADING by themselves (Redisson does), and a refused wait
// should reach the caller instead.
func queueFullReply(e *locks.QueueFullError) []byte {
	if e.Max == 0 {
		return redcon.AppendError(nil, "QUEUEFULL fenceproxy: waiting for a lock is disabled (--max-waiters 0); retry later without WAIT or raise the limit")
	}
	return redcon.AppendError(nil, "QUEUEFULL fenceproxy: "+strconv.Itoa(e.Max)+
		" clients already wait for this resource (--max-waiters); retry later or raise the limit")
}

// appendLockInfoMore appends LOCK.INFO's acquired-at, renewed-at (unix ms,
// -1 when free or not recorded) and client-addr (null then) to b.
func appendLockInfoMore(b []byte, info locks.Info, null []byte) []byte {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return -1
		}
		return t.UnixMilli()
	}
	b = redcon.AppendBulkString(b, "acquired-at")
	b = redcon.AppendInt(b, ms(info.Acquired))
	b = redcon.AppendBulkString(b, "renewed-at")
	b = redcon.AppendInt(b, ms(info.Renewed))
	b = redcon.AppendBulkString(b, "client-addr")
	if info.ClientAddr == "" {
		return append(b, null...)
	}
	return redcon.AppendBulkString(b, info.ClientAddr)
}

var slowlogHelp = []string{
	"LOCK.SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"GET [<count>]",
	"    Return top <count> entries from the slow-lock log (default: 10, -1 means all).",
	"    Entries are made of:",
	"    id, unix-time-ms, duration-ms, kind (wait, held or expired), resource, token, client-addr",
	"LEN",
	"    Return the length of the slow-lock log.",
	"RESET",
	"    Reset the slow-lock log.",
	"HELP",
	"    Print this help.",
}

// Slowlog is LOCK.SLOWLOG GET [count] | LEN | RESET | HELP, shaped like
// Redis's SLOWLOG.
func (fam *Family) Slowlog(c Conn, args [][]byte, p *resp.Reply) {
	sub := strings.ToLower(string(args[1]))
	lm := fam.opts.Manager
	switch {
	case sub == "get" && len(args) <= 3:
		n := int64(10)
		if len(args) == 3 {
			var ok bool
			if n, ok = resp.ParseInt(args[2]); !ok {
				p.DoneError("ERR value is not an integer or out of range")
				return
			}
			if n < -1 {
				p.DoneError("ERR count should be greater than or equal to -1")
				return
			}
		}
		var entries []locks.SlowEntry
		if fam.opts.Auth {
			entries = fam.visibleSlowLog(c, int(n))
		} else {
			entries = lm.SlowLog(int(n))
		}
		null := nullReply(c)
		b := redcon.AppendArray(p.Buf, len(entries))
		for _, e := range entries {
			b = redcon.AppendArray(b, 7)
			b = redcon.AppendInt(b, int64(e.ID))
			b = redcon.AppendInt(b, e.Time.UnixMilli())
			b = redcon.AppendInt(b, e.Duration.Milliseconds())
			b = redcon.AppendBulkString(b, e.Kind)
			b = redcon.AppendBulkString(b, e.Resource)
			b = redcon.AppendInt(b, int64(e.Token))
			if e.ClientAddr == "" {
				b = append(b, null...)
			} else {
				b = redcon.AppendBulkString(b, e.ClientAddr)
			}
		}
		p.Buf = b
		p.Done()
	case sub == "len" && len(args) == 2:
		p.DoneInt(int64(lm.SlowLogLen()))
	case sub == "reset" && len(args) == 2:
		lm.SlowLogReset()
		p.DoneOK()
	case sub == "help" && len(args) == 2:
		b := redcon.AppendArray(p.Buf, len(slowlogHelp))
		for _, l := range slowlogHelp {
			b = redcon.AppendBulkString(b, l)
		}
		p.Buf = b
		p.Done()
	case sub == "get" || sub == "len" || sub == "reset" || sub == "help":
		p.DoneError("ERR wrong number of arguments for 'lock.slowlog|" + sub + "' command")
	default:
		p.DoneError("ERR unknown subcommand '" + clip(string(args[1]), 128) + "'. Try LOCK.SLOWLOG HELP.")
	}
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Section is the body of INFO's "# locks" section; counts writes each lock
// command's counters' lines (the command table knows them) with line.
func (fam *Family) Section(counts func(line func(name string, v int64))) string {
	st := fam.opts.Manager.Stats()
	m := fam.opts.Metrics
	ms := func(d time.Duration) int64 {
		if d < 0 {
			return -1
		}
		return d.Milliseconds()
	}
	var b strings.Builder
	line := func(name string, v int64) {
		b.WriteString(name)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(v, 10))
		b.WriteString("\r\n")
	}
	line("locks_held", int64(st.Held))
	line("locks_untracked_grants", int64(st.Untracked))
	line("lock_waiters", st.Waiters)
	counts(line) // each lock command's counts, as the command table says
	line("lock_expirations", int64(metrics.Count(m.LockExpirations)))
	line("lock_delay_ms", st.Options.LockDelay.Milliseconds())
	line("max_waiters", int64(st.Options.MaxWaiters))
	line("slowlock_log_slower_than_ms", ms(st.Options.SlowWait))
	line("slowlock_held_longer_than_ms", ms(st.Options.SlowHeld))
	line("slowlog_len", int64(st.SlowLen))
	line("slowlog_max_len", int64(st.Options.SlowLogLen))
	return b.String()
}
