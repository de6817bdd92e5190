package protocol

import (
	"testing"
	"time"
)

// BenchmarkServeRoundTrip: the connection's cost per request with Redis's
// default limits, and with every client limit switched on (normal hard and
// soft output limits, an idle timeout): the limits must cost next to
// nothing per request.
func BenchmarkServeRoundTrip(b *testing.B) {
	b.Run("defaults", func(b *testing.B) { benchServe(b, okHandler{}, func(*Server) {}) })
	b.Run("limits", func(b *testing.B) {
		benchServe(b, okHandler{}, func(s *Server) {
			s.NormalOutput = OutputLimit{Hard: 1 << 20, Soft: 512 << 10, SoftFor: time.Minute}
			s.IdleTimeout = time.Minute
		})
	})
}
