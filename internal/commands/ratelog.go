package commands

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// everySecond logs at most once a second per instance: a condition that
// fails every request (a fence store that cannot write) must not flood the
// log with one line per request. The first line of each second carries
// the count of lines left out before it.
type everySecond struct {
	last    atomic.Int64
	dropped atomic.Int64
}

func (e *everySecond) error(l *slog.Logger, msg string, attrs ...any) {
	now := time.Now().Unix()
	if last := e.last.Load(); last == now || !e.last.CompareAndSwap(last, now) {
		e.dropped.Add(1)
		return
	}
	if n := e.dropped.Swap(0); n > 0 {
		attrs = append(attrs, "similar_lines_left_out", n)
	}
	l.Error(msg, attrs...)
}

// storeErrorLog rate-limits "fence store cannot issue tokens".
var storeErrorLog everySecond
