package cluster

import "testing"

// TestMerges: the replies of a request split over masters merge into what
// one node holding every key would answer, and a bad part never yields a
// half-written reply.
func TestMerges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		m     merge
		parts []string
		order [][2]int
		want  string
	}{
		{"mget in key order", mergeArrays, []string{"*2\r\n$1\r\na\r\n$-1\r\n", "*1\r\n$1\r\nb\r\n"},
			[][2]int{{1, 0}, {0, 0}, {0, 1}}, "*3\r\n$1\r\nb\r\n$1\r\na\r\n$-1\r\n"},
		{"mget part too short", mergeArrays, []string{"*1\r\n$1\r\na\r\n"}, [][2]int{{0, 0}, {0, 1}}, replyBadPart},
		{"mget part an error", mergeArrays, []string{"*1\r\n:1\r\n", "-MOVED 1 a:1\r\n"}, [][2]int{{0, 0}, {1, 0}}, "-MOVED 1 a:1\r\n"},
		{"del summed", mergeSum, []string{":2\r\n", ":3\r\n"}, nil, ":5\r\n"},
		{"sum of a non-integer", mergeSum, []string{":2\r\n", "+OK\r\n"}, nil, replyBadPart},
		{"mset", mergeOK, []string{"+OK\r\n", "+OK\r\n"}, nil, "+OK\r\n"},
		{"keys joined", mergeConcat, []string{"*1\r\n$1\r\na\r\n", "*0\r\n", "*1\r\n$1\r\nb\r\n"}, nil, "*2\r\n$1\r\na\r\n$1\r\nb\r\n"},
		{"script exists: 1 only on every master", mergeScript, []string{"*2\r\n:1\r\n:1\r\n", "*2\r\n:0\r\n:1\r\n"}, nil, "*2\r\n:0\r\n:1\r\n"},
		{"script load", mergeScript, []string{"$3\r\nsha\r\n", "$3\r\nsha\r\n"}, nil, "$3\r\nsha\r\n"},
		{"pubsub numsub summed", mergePubsub, []string{"*2\r\n$1\r\nc\r\n:1\r\n", "*2\r\n$1\r\nc\r\n:2\r\n"}, nil, "*2\r\n$1\r\nc\r\n:3\r\n"},
		{"pubsub channels without repeats", mergePubsub, []string{"*2\r\n$1\r\nc\r\n$1\r\nd\r\n", "*1\r\n$1\r\nc\r\n"}, nil, "*2\r\n$1\r\nc\r\n$1\r\nd\r\n"},
		{"pubsub numpat", mergePubsub, []string{":1\r\n", ":2\r\n"}, nil, ":3\r\n"},
	} {
		parts := make([][]byte, len(tc.parts))
		for i, p := range tc.parts {
			parts[i] = []byte(p)
		}
		if got := string(tc.m(parts, tc.order, []byte("prev"))); got != "prev"+tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, "prev"+tc.want)
		}
	}
}

func TestScanReply(t *testing.T) {
	for _, tc := range []struct {
		reply       string
		at, masters int
		want        string
	}{
		{"*2\r\n$2\r\n17\r\n*1\r\n$1\r\nk\r\n", 1, 3, "*2\r\n$5\r\n17409\r\n*1\r\n$1\r\nk\r\n"}, // 17<<10 | 1
		{"*2\r\n$1\r\n0\r\n*0\r\n", 1, 3, "*2\r\n$1\r\n2\r\n*0\r\n"},                            // next master
		{"*2\r\n$1\r\n0\r\n*0\r\n", 2, 3, "*2\r\n$1\r\n0\r\n*0\r\n"},                            // done
		{"-ERR invalid cursor\r\n", 0, 3, "-ERR invalid cursor\r\n"},
	} {
		if got := string(scanReply([]byte(tc.reply), tc.at, tc.masters, nil)); got != tc.want {
			t.Errorf("scanReply(%q, %d, %d) = %q, want %q", tc.reply, tc.at, tc.masters, got, tc.want)
		}
	}
}
