package fanout

import "testing"

// TestMerges: the replies of a request split over masters merge into what
// one node holding every key would answer, and a bad part never yields a
// half-written reply.
func TestMerges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		m     Merge
		parts []string
		order [][2]int
		want  string
	}{
		{"mget in key order", mergeArrays, []string{"*2\r\n$1\r\na\r\n$-1\r\n", "*1\r\n$1\r\nb\r\n"},
			[][2]int{{1, 0}, {0, 0}, {0, 1}}, "*3\r\n$1\r\nb\r\n$1\r\na\r\n$-1\r\n"},
		{"mget part too short", mergeArrays, []string{"*1\r\n$1\r\na\r\n"}, [][2]int{{0, 0}, {0, 1}}, replyBadPart},
		{"mget part an error", mergeArrays, []string{"*1\r\n:1\r\n", "-MOVED 1 a:1\r\n"}, [][2]int{{0, 0}, {1, 0}}, "-MOVED 1 a:1\r\n"},
		{"del summed", MergeSum, []string{":2\r\n", ":3\r\n"}, nil, ":5\r\n"},
		{"sum of a non-integer", MergeSum, []string{":2\r\n", "+OK\r\n"}, nil, replyBadPart},
		{"mset", mergeOK, []string{"+OK\r\n", "+OK\r\n"}, nil, "+OK\r\n"},
		{"keys joined", mergeConcat, []string{"*1\r\n$1\r\na\r\n", "*0\r\n", "*1\r\n$1\r\nb\r\n"}, nil, "*2\r\n$1\r\na\r\n$1\r\nb\r\n"},
		{"script exists: 1 only on every master", mergeScript, []string{"*2\r\n:1\r\n:1\r\n", "*2\r\n:0\r\n:1\r\n"}, nil, "*2\r\n:0\r\n:1\r\n"},
		{"script load", mergeScript, []string{"$3\r\nsha\r\n", "$3\r\nsha\r\n"}, nil, "$3\r\nsha\r\n"},
		{"pubsub numsub summed", mergePubsub, []string{"*2\r\n$1\r\nc\r\n:1\r\n", "*2\r\n$1\r\nc\r\n:2\r\n"}, nil, "*2\r\n$1\r\nc\r\n:3\r\n"},
		{"pubsub channels without repeats", mergePubsub, []string{"*2\r\n$1\r\nc\r\n$1\r\nd\r\n", "*1\r\n$1\r\nc\r\n"}, nil, "*2\r\n$1\r\nc\r\n$1\r\nd\r\n"},
		// Patterns are all on the clients' home master (keyspace ones on
		// every master too): the largest count, not the sum.
		{"pubsub numpat", mergePubsub, []string{":1\r\n", ":2\r\n"}, nil, ":2\r\n"},
		{"pubsub numsub of a keyspace channel: on every master", mergePubsub,
			[]string{"*4\r\n$1\r\nc\r\n:1\r\n$19\r\n__keyspace@0__:kkkk\r\n:1\r\n", "*4\r\n$1\r\nc\r\n:2\r\n$19\r\n__keyspace@0__:kkkk\r\n:1\r\n"},
			nil, "*4\r\n$1\r\nc\r\n:3\r\n$19\r\n__keyspace@0__:kkkk\r\n:1\r\n"},
		{"pubsub numsub, a RESP3 map", mergePubsub, []string{"%1\r\n$1\r\nc\r\n:1\r\n", "%1\r\n$1\r\nc\r\n:2\r\n"}, nil, "%1\r\n$1\r\nc\r\n:3\r\n"},
		{"latency reset: the largest", mergeLargest, []string{":1\r\n", ":2\r\n"}, nil, ":2\r\n"},
		{"function stats: the busy master's", mergeFunctionStats,
			[]string{"*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*0\r\n", "*4\r\n$14\r\nrunning_script\r\n*0\r\n$7\r\nengines\r\n*0\r\n"},
			nil, "*4\r\n$14\r\nrunning_script\r\n*0\r\n$7\r\nengines\r\n*0\r\n"},
		{"latency latest: per event, the latest and the largest", mergeLatencyLatest,
			[]string{"*1\r\n*4\r\n$7\r\ncommand\r\n:100\r\n:5\r\n:9\r\n", "*2\r\n*4\r\n$4\r\nfork\r\n:50\r\n:1\r\n:1\r\n*4\r\n$7\r\ncommand\r\n:200\r\n:3\r\n:4\r\n"},
			nil, "*2\r\n*4\r\n$7\r\ncommand\r\n:200\r\n:3\r\n:9\r\n*4\r\n$4\r\nfork\r\n:50\r\n:1\r\n:1\r\n"},
		{"latency history: oldest first", mergeLatencyHistory,
			[]string{"*1\r\n*2\r\n:300\r\n:1\r\n", "*2\r\n*2\r\n:100\r\n:2\r\n*2\r\n:400\r\n:3\r\n"},
			nil, "*3\r\n*2\r\n:100\r\n:2\r\n*2\r\n:300\r\n:1\r\n*2\r\n:400\r\n:3\r\n"},
		{"latency histogram: calls summed, cumulative buckets added", mergeLatencyHistogram,
			[]string{"%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:3\r\n$14\r\nhistogram_usec\r\n%2\r\n:1\r\n:1\r\n:4\r\n:3\r\n",
				"%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n%1\r\n:2\r\n:2\r\n"},
			nil, "%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:5\r\n$14\r\nhistogram_usec\r\n%3\r\n:1\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n"},
		{"latency histogram: a command run on every master counts one master's calls", mergeLatencyHistogram,
			[]string{"*2\r\n$16\r\nconfig|resetstat\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:8\r\n:1\r\n",
				"*2\r\n$16\r\nconfig|resetstat\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*2\r\n:16\r\n:2\r\n"},
			nil, "*2\r\n$16\r\nconfig|resetstat\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*2\r\n:16\r\n:2\r\n"},
		{"slowlog get: newest first, count kept", slowlogMerge(argv("slowlog", "get", "2"), nil),
			[]string{"*1\r\n*2\r\n:7\r\n:100\r\n", "*2\r\n*2\r\n:2\r\n:300\r\n*2\r\n:1\r\n:50\r\n"},
			nil, "*2\r\n*2\r\n:2\r\n:300\r\n*2\r\n:7\r\n:100\r\n"},
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

// TestMergeInfo: INFO of every master merges into one node's: keyspace and
// stats summed (but a command the proxy runs on every master, CONFIG
// RESETSTAT, counts one master's calls), the rest the first master's.
func TestMergeInfo(t *testing.T) {
	a := "# Server\r\nredis_version:7.0.15\r\ntcp_port:1\r\n\r\n# Clients\r\nconnected_clients:9\r\nblocked_clients:0\r\n\r\n# Stats\r\ntotal_commands_processed:10\r\ninstantaneous_input_kbps:0.50\r\nlatest_fork_usec:30\r\n\r\n" +
		"# Commandstats\r\ncmdstat_get:calls=2,usec=4,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\ncmdstat_config|resetstat:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n\r\n# Keyspace\r\n"
	b := "# Server\r\nredis_version:7.0.15\r\ntcp_port:2\r\n\r\n# Clients\r\nconnected_clients:8\r\nblocked_clients:2\r\n\r\n# Stats\r\ntotal_commands_processed:5\r\ninstantaneous_input_kbps:0.25\r\nlatest_fork_usec:10\r\n\r\n" +
		"# Commandstats\r\ncmdstat_get:calls=2,usec=8,usec_per_call=4.00,rejected_calls=0,failed_calls=1\r\ncmdstat_set:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\ncmdstat_config|resetstat:calls=2,usec=7,usec_per_call=3.50,rejected_calls=0,failed_calls=0\r\n\r\n" +
		"# Keyspace\r\ndb0:keys=3,expires=2,avg_ttl=100\r\n"
	c := "# Server\r\nredis_version:7.0.15\r\ntcp_port:3\r\n\r\n# Clients\r\nconnected_clients:7\r\nblocked_clients:1\r\n\r\n# Stats\r\ntotal_commands_processed:1\r\ninstantaneous_input_kbps:0.00\r\nlatest_fork_usec:0\r\n\r\n" +
		"# Commandstats\r\n\r\n# Keyspace\r\ndb0:keys=1,expires=1,avg_ttl=400\r\n"
	want := "# Server\r\nredis_version:7.0.15\r\ntcp_port:1\r\n\r\n# Clients\r\nconnected_clients:9\r\nblocked_clients:3\r\n\r\n# Stats\r\ntotal_commands_processed:16\r\ninstantaneous_input_kbps:0.75\r\nlatest_fork_usec:30\r\n\r\n" +
		"# Commandstats\r\ncmdstat_get:calls=4,usec=12,usec_per_call=3.00,rejected_calls=0,failed_calls=1\r\ncmdstat_config|resetstat:calls=2,usec=7,usec_per_call=3.50,rejected_calls=0,failed_calls=0\r\ncmdstat_set:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n\r\n" +
		"# Keyspace\r\ndb0:keys=4,expires=3,avg_ttl=200\r\n"
	if got := MergeInfo([]string{a, b, c}); got != want {
		t.Errorf("mergeInfo:\n%q\nwant\n%q", got, want)
	}
}

// TestMirroredPattern: a pattern is mirrored on every master when it may
// match a keyspace notification channel.
func TestMirroredPattern(t *testing.T) {
	for pat, want := range map[string]bool{
		"*": true, "__key*__:*": true, "__keyspace@0__:*": true, "__keyevent@*__:del": true,
		"__key?pace@*": true, "__[k]ey*": true, "__[^a]eyevent@0__:x": true, "_[_a-z]*": true,
		"\\_\\_key*": true, "?": false, "???????????*": true,
		"foo*": false, "__redis__:*": false, "__[^k]ey*": false, "__keyspac@*": false, "[a-z]*": false,
	} {
		if got := MirroredPattern([]byte(pat)); got != want {
			t.Errorf("MirroredPattern(%q) = %v, want %v", pat, got, want)
		}
	}
	if !Mirrored([]byte("__keyevent@0__:del")) || Mirrored([]byte("news")) {
		t.Error("Mirrored: keyspace channels only")
	}
}
