package protocol

import (
	"strconv"
	"testing"
	"time"
)

func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "12": 12, "12b": 12, "1k": 1000, "1kb": 1024, "1K": 1000, "1KB": 1024,
		"32mb": 32 << 20, "8m": 8000000, "1gb": 1 << 30, "2G": 2000000000, "1Gb": 1 << 30,
	} {
		if got, err := ParseMemory(in); err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "mb", "-1", "1.5mb", "1tb", "1 mb", "k1", "99999999999999999999", "9999999999gb"} {
		if got, err := ParseMemory(in); err == nil {
			t.Errorf("ParseMemory(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseOutputLimits(t *testing.T) {
	normal, pubsub := DefaultNormalOutput, DefaultPubSubOutput
	if err := ParseOutputLimits("normal 1mb 512kb 10;pubsub 0 0 0 replica 1 2 3", &normal, &pubsub); err != nil {
		t.Fatal(err)
	}
	if want := (OutputLimit{1 << 20, 512 << 10, 10 * time.Second}); normal != want {
		t.Errorf("normal = %+v, want %+v", normal, want)
	}
	if pubsub != (OutputLimit{}) {
		t.Errorf("pubsub = %+v, want no limit", pubsub)
	}
	if err := ParseOutputLimits("PubSub 2mb 1mb 5", &normal, &pubsub); err != nil || pubsub.Hard != 2<<20 || normal.Hard != 1<<20 {
		t.Errorf("a second setting: normal %+v pubsub %+v, %v", normal, pubsub, err)
	}
	for _, in := range []string{"", "normal", "normal 1 2", "normal 1 2 3 pubsub", "master 1 2 3", "bogus 1 2 3",
		"normal x 2 3", "normal 1 y 3", "normal 1 2 z", "normal 1 2 -3", "normal 1 2 3s"} {
		if err := ParseOutputLimits(in, &normal, &pubsub); err == nil {
			t.Errorf("ParseOutputLimits(%q) accepted", in)
		}
	}
}

// TestQueryBufferLimitParser: a request whose arguments together outgrow
// MaxQueryBuf is refused before the chunk that would cross it is allocated,
// with ErrQueryBufferLimit (not a protocol error: no reply is due).
func TestQueryBufferLimitParser(t *testing.T) {
	limits := DefaultLimits
	limits.MaxQueryBuf = 3 << 20
	big := make([]byte, 2<<20)
	for _, tc := range []struct {
		sizes []int
		ok    bool
	}{
		{[]int{1 << 20, 1 << 20}, true},
		{[]int{3 << 20}, true},
		{[]int{3<<20 + 1}, false},
		{[]int{2 << 20, 1 << 20, 1}, false},
	} {
		var req []byte
		req = append(req, "*"...)
		req = strconv.AppendInt(req, int64(len(tc.sizes)), 10)
		for _, n := range tc.sizes {
			req = append(req, "\r\n$"...)
			req = strconv.AppendInt(req, int64(n), 10)
			req = append(req, "\r\n"...)
			for n > 0 {
				k := min(n, len(big))
				req = append(req, big[:k]...)
				n -= k
			}
		}
		req = append(req, "\r\n"...)
		_, err := readOne(t, string(req), limits)
		if tc.ok != (err == nil) || (!tc.ok && err != ErrQueryBufferLimit) {
			t.Errorf("arguments %v: err %v, want ok=%v", tc.sizes, err, tc.ok)
		}
	}
}

func TestNextWindow(t *testing.T) {
	for _, tc := range []struct {
		window, n int
		produced  int64
		want      int
	}{
		{64, 64, 64 * 5, 128},        // a full batch of small replies: doubles
		{1024, 1024, 1024 * 5, 1024}, // capped at maxBatch
		{64, 10, 10 * 5, 64},         // a short batch of small replies: stays
		{64, 64, 64 << 18, 4},        // 256 KB replies: 4 fit in maxBatchBytes
		{64, 1, 10 << 20, 1},         // one reply over maxBatchBytes: one at a time
		{1, 1, 5, 2},                 // and grows back
		{512, 512, 512 << 11, 512},   // 2 KB replies: 512 fit, no more
		{1024, 3, 0, 1024},           // no bytes (writes taken): unchanged
	} {
		if got := nextWindow(tc.window, tc.n, tc.produced); got != tc.want {
			t.Errorf("nextWindow(%d, %d, %d) = %d, want %d", tc.window, tc.n, tc.produced, got, tc.want)
		}
	}
}
