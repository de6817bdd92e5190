package tokenstate

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestFormatsAreFixed pins what is on disk in deployed directories: the
// keys, a token's encoding and the merger's name.
func TestFormatsAreFixed(t *testing.T) {
	for _, c := range []struct{ got, want []byte }{
		{TokenKey("r"), []byte("t/r")},
		{TokenKey([]byte("r")), []byte("t/r")},
		{ReservedKey("r", 0x0102), []byte("p/\x00\x00\x00\x00\x00\x00\x01\x02r")},
		{EncodeToken(0x0102), []byte("\x00\x00\x00\x00\x00\x00\x01\x02")},
		{BoundKey, []byte("m/bound")}, {FloorKey, []byte("m/floor")},
		{IDKey, []byte("m/id")}, {RunKey, []byte("m/run")}, {DirKey, []byte("m/dir")},
		{AppliedKey, []byte("m/applied")}, {TierKey, []byte("m/tier")}, {LeaderKey, []byte("m/leader")},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if MaxMerger.Name != "fenceproxy.max_u64_be.v1" {
		t.Errorf("MaxMerger.Name = %q: a deployed directory would not open", MaxMerger.Name)
	}
}

func TestReservedKeyParsesBack(t *testing.T) {
	for _, r := range []string{"r", "", "y\x00z", "\xff\xff"} {
		token, res, ok := ParseReservedKey(ReservedKey(r, 1<<40+7))
		if !ok || token != 1<<40+7 || string(res) != r {
			t.Errorf("%q: got %d %q %v", r, token, res, ok)
		}
	}
	if _, _, ok := ParseReservedKey([]byte("p/1234567")); ok {
		t.Error("a key too short for a token parsed")
	}
}

func TestDecodeTokenRefusesOtherLengths(t *testing.T) {
	for _, v := range [][]byte{nil, {1}, make([]byte, 9)} {
		if got, err := DecodeToken(v); got != 0 || !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeToken(%x) = %d, %v", v, got, err)
		}
	}
}

// TestMaxMergeInAnyOrder: the stored value is the maximum of every
// operand, whatever order they were merged in, across a flush too.
func TestMaxMergeInAnyOrder(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Merger: MaxMerger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k := TokenKey("r")
	for i, tok := range []uint64{5, 9, 3} {
		if err := db.Merge(k, EncodeToken(tok), nil); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	v, closer, err := db.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if got, _ := DecodeToken(v); got != 9 {
		t.Fatalf("merged value %d, want 9", got)
	}
}

func TestRules(t *testing.T) {
	for _, c := range []struct{ foreign, want uint64 }{{0, 1}, {7, 8}, {MaxToken - 1, MaxToken}, {MaxToken, MaxToken}, {^uint64(0), MaxToken}} {
		if got := FloorAbove(c.foreign); got != c.want {
			t.Errorf("FloorAbove(%d) = %d, want %d", c.foreign, got, c.want)
		}
	}
	for _, c := range []struct{ above, window, want uint64 }{
		{0, 16, 16}, {MaxToken - 17, 16, MaxToken - 1}, {MaxToken - 16, 16, MaxToken}, {MaxToken + 5, 16, MaxToken},
	} {
		if got := NextBound(c.above, c.window); got != c.want {
			t.Errorf("NextBound(%d, %d) = %d, want %d", c.above, c.window, got, c.want)
		}
	}
	if Newest(3, 7) != 7 || Newest(9, 7) != 9 {
		t.Error("Newest is not the maximum of the stored token and the floor")
	}
	if Issuable(7, 7, 10) || !Issuable(8, 7, 10) || !Issuable(10, 7, 10) || Issuable(11, 7, 10) {
		t.Error("Issuable is not (floor, bound]")
	}
}

// TestL0GathersSublevels holds PebbleOptions to gathering L0 before a
// compaction: flushes of keys over the same range stack up as L0
// sublevels, and Pebble compacts L0 once twice its depth reaches
// L0CompactionThreshold: at 2 sublevels with its default (4), at
// l0Compaction/2 with PebbleOptions.
func TestL0GathersSublevels(t *testing.T) {
	opts := PebbleOptions()
	opts.FS = vfs.NewMem()
	db, err := pebble.Open("", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const flushes = l0Compaction/2 - 1
	for f := range flushes {
		for r := range 100 {
			k := TokenKey(string(rune('a'+r%26)) + string(rune('a'+r/26)))
			if err := db.Merge(k, EncodeToken(uint64(f*100+r+1)), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// No wait for a compaction to show: one due is either done, running,
	// or still due, which L0's fill factor says (Pebble's score: 1 or more
	// is due).
	m := db.Metrics()
	if n, ff := m.Levels[0].Sublevels, m.Levels[0].FillFactor; n != flushes || ff >= 1 || m.Compact.Count+m.Compact.NumInProgress != 0 {
		t.Fatalf("L0 holds %d sublevels after %d flushes of overlapping keys (fill factor %.2f), %d compactions ran or run: L0 is compacted sooner than at %d sublevels",
			n, flushes, ff, m.Compact.Count+m.Compact.NumInProgress, l0Compaction/2)
	}
}
