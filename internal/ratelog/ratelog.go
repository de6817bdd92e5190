// Package ratelog logs a condition that can recur on every request (a fence
// store that cannot write, a grant made at a known risk) at most once a
// second, so that it shows in the log without flooding it.
package ratelog

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// EverySecond logs at most one line a second. The first line of each
// second carries the count of lines left out before it. The zero value is
// ready; it is safe for concurrent use.
type EverySecond struct {
	last    atomic.Int64
	dropped atomic.Int64
}

// Error logs msg at error level, unless a line was logged this second.
func (e *EverySecond) Error(l *slog.Logger, msg string, attrs ...any) {
	e.log(l, slog.LevelError, msg, attrs)
}

// Warn logs msg at warning level, unless a line was logged this second.
func (e *EverySecond) Warn(l *slog.Logger, msg string, attrs ...any) {
	e.log(l, slog.LevelWarn, msg, attrs)
}

func (e *EverySecond) log(l *slog.Logger, level slog.Level, msg string, attrs []any) {
	now := time.Now().Unix()
	if last := e.last.Load(); last == now || !e.last.CompareAndSwap(last, now) {
		e.dropped.Add(1)
		return
	}
	if n := e.dropped.Swap(0); n > 0 {
		attrs = append(attrs, "similar_lines_left_out", n)
	}
	l.Log(context.Background(), level, msg, attrs...)
}
