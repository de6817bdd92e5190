package persist

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

func TestTokensIncreaseAcrossReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "data") // parents created too
	var prev uint64
	for gen := 0; gen < 5; gen++ {
		s := openT(t, dir, Options{ReserveWindow: 10})
		for i := 0; i < 25; i++ { // crosses the bound twice per generation
			tok := nextT(t, s)
			if tok <= prev {
				t.Fatalf("gen %d: token %d after %d", gen, tok, prev)
			}
			prev = tok
		}
		if st := s.Stats(); st.LastIssued != prev || st.ReservedBound < prev {
			t.Fatalf("stats %+v after token %d", st, prev)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenLockedDir(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	_, err := Open(dir, Options{})
	mustIs(t, err, ErrLocked)
	if !strings.HasPrefix(err.Error(), "persist: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	openT(t, dir, Options{}).Close() // the lock is released by Close
}

func TestOpenUnusableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(file, "data"), Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "persist: create data dir") {
		t.Fatalf("Open under a file: %v", err)
	}
}

func TestRecordAndNewest(t *testing.T) {
	s := openT(t, "/data", Options{FS: vfs.NewMem()})
	defer s.Close()
	bin := string([]byte{0, '\r', '\n', 0xff, ' '})
	long := strings.Repeat("x", MaxResourceLen)
	t1, t2, t3 := nextT(t, s), nextT(t, s), nextT(t, s)

	if err := grant(s, Grant{Resource: []byte(bin), Token: t2}, Grant{Resource: []byte(long), Token: t1}); err != nil {
		t.Fatal(err)
	}
	if err := grant(s, Grant{Resource: []byte(bin), Token: t1}); err != nil { // older: no effect
		t.Fatal(err)
	}
	if err := grant(s, Grant{Resource: []byte(long), Token: t3}, Grant{Resource: []byte(long), Token: t2}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    string
		want uint64
	}{{bin, t2}, {long, t3}, {"unknown", 0}, {bin[:1], 0}} {
		for i := 0; i < 2; i++ { // miss, then hit
			if got := newestT(t, s, c.r); got != c.want {
				t.Fatalf("Newest(%q) = %d, want %d", c.r, got, c.want)
			}
		}
	}
	if st := s.Stats(); st.CacheHits != 4 || st.CacheMisses != 4 || st.CacheEntries != 4 {
		t.Fatalf("stats %+v", st)
	}
	// A Record raises a cached entry.
	t4 := nextT(t, s)
	if err := grant(s, Grant{Resource: []byte(bin), Token: t4}); err != nil {
		t.Fatal(err)
	}
	if got := newestT(t, s, bin); got != t4 {
		t.Fatalf("after raise: %d, want %d", got, t4)
	}
}

func TestRejectsBadInput(t *testing.T) {
	s := openT(t, "/data", Options{FS: vfs.NewMem()})
	defer s.Close()
	tok := nextT(t, s)
	good := Grant{Resource: []byte("r"), Token: tok}
	for _, c := range []struct {
		name string
		g    Grant
		want error
	}{
		{"empty resource", Grant{Resource: nil, Token: tok}, ErrBadResource},
		{"oversized resource", Grant{Resource: bytes.Repeat([]byte("x"), MaxResourceLen+1), Token: tok}, ErrBadResource},
		{"token 0", Grant{Resource: []byte("r"), Token: 0}, ErrBadToken},
		{"token not issued", Grant{Resource: []byte("r"), Token: tok + 1}, ErrBadToken},
		{"token beyond bound", Grant{Resource: []byte("r"), Token: s.Stats().ReservedBound + 1}, ErrBadToken},
	} {
		// good comes first: nothing of a rejected call may be written.
		mustIs(t, grant(s, good, c.g), c.want)
		if c.want == ErrBadResource {
			_, err := s.Newest(c.g.Resource)
			mustIs(t, err, ErrBadResource)
		}
	}
	if got := newestT(t, s, "r"); got != 0 {
		t.Fatalf("rejected Records wrote %d", got)
	}
	if err := grant(s); err != nil {
		t.Fatalf("empty Record: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s := openT(t, "/data", Options{FS: vfs.NewMem()})
	tok := nextT(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.NextToken()
	mustIs(t, err, ErrClosed)
	mustIs(t, grant(s, Grant{Resource: []byte("r"), Token: tok}), ErrClosed)
	_, err = s.Newest([]byte("r"))
	mustIs(t, err, ErrClosed)
	mustIs(t, s.Close(), ErrClosed)
}

func TestTokenSpaceExhausted(t *testing.T) {
	fs := vfs.NewMem()
	openT(t, "/data", Options{FS: fs}).Close()
	// Plant a bound 3 short of MaxToken, as if after very many restarts.
	db, err := pebble.Open("/data", &pebble.Options{FS: fs, Merger: tokenstate.MaxMerger, FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(tokenstate.BoundKey, tokenstate.EncodeToken(MaxToken-3), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openT(t, "/data", Options{FS: fs})
	defer s.Close()
	for want := uint64(MaxToken - 2); want <= MaxToken; want++ {
		if got := nextT(t, s); got != want {
			t.Fatalf("token %d, want %d", got, want)
		}
	}
	for i := 0; i < 2; i++ {
		_, err := s.NextToken()
		mustIs(t, err, ErrExhausted)
	}
}

// TestWideReserveWindowIsClamped: a ReserveWindow wider than the token
// space is taken as MaxToken, so the bound arithmetic cannot underflow:
// tokens are issued, and the bound never passes MaxToken.
func TestWideReserveWindowIsClamped(t *testing.T) {
	s, err := Open(t.TempDir(), Options{ReserveWindow: 1 << 60})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 3 {
		tok, err := s.NextToken()
		if err != nil || tok == 0 || tok > MaxToken {
			t.Fatalf("NextToken with a window of 2^60 = %d, %v; want a token in 1..MaxToken", tok, err)
		}
	}
	if b := s.Stats().ReservedBound; b > MaxToken {
		t.Fatalf("reserved bound %d above MaxToken %d", b, MaxToken)
	}
}
