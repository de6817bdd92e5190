package tier

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"
)

// TestClosedStoreRefusesInsteadOfPanicking: raft's transport may still be
// serving an RPC that began before the node stopped when its stores close
// (CI: "panic: pebble: closed" from a heartbeat's setCurrentTerm). After
// Close, the log store's operations fail with errStoreClosed, and Close is
// safe twice.
func TestClosedStoreRefusesInsteadOfPanicking(t *testing.T) {
	s, err := openPebbleStore(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	for name, err := range map[string]error{
		"StoreLogs":   s.StoreLogs([]*raft.Log{{Index: 2, Term: 1}}),
		"GetLog":      s.GetLog(1, &l),
		"DeleteRange": s.DeleteRange(1, 1),
		"Close":       s.Close(),
	} {
		if name == "Close" {
			if err != nil {
				t.Errorf("a second Close: %v", err)
			}
			continue
		}
		if !errors.Is(err, errStoreClosed) {
			t.Errorf("%s after Close: %v, want errStoreClosed", name, err)
		}
	}
	if _, err := s.LastIndex(); !errors.Is(err, errStoreClosed) {
		t.Errorf("LastIndex after Close: %v", err)
	}
	if _, err := s.GetUint64([]byte("CurrentTerm")); !errors.Is(err, errStoreClosed) {
		t.Errorf("GetUint64 after Close: %v", err)
	}
}
