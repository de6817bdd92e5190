package commands

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/authority"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

func cmd(args ...string) []byte {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return resp.AppendCommand(nil, b)
}

// TestReplicaStream: the snapshot is relayed as it is (cut anywhere), and
// the stream without the authority's writes: its MULTI blocks and SELECTs
// go, a block with a client's write keeps only that, and a SELECT comes
// only where the database of the next relayed command changes (never
// before PING).
func TestReplicaStream(t *testing.T) {
	live, bound := "fenceproxy:lock:{authority}:live", "fenceproxy:lock:{authority}:bound"
	rdb := "REDIS0010\xfa\x09redis-ver\x067.0.15$5\r\n*1\r\n\xff01234567"
	in := "\n\n$" + itoa(len(rdb)) + "\r\n" + rdb + string(cmd("SELECT", "9")) + string(cmd("set", "a", "1")) +
		string(cmd("MULTI")) + string(cmd("SELECT", "15")) + string(cmd("zadd", live, "1", "m")) + string(cmd("pexpire", live, "10")) + string(cmd("EXEC")) +
		string(cmd("PING")) +
		string(cmd("SELECT", "9")) + string(cmd("incr", "a")) +
		string(cmd("SELECT", "15")) + string(cmd("hset", bound, "bound", "5")) +
		string(cmd("MULTI")) + string(cmd("SELECT", "9")) + string(cmd("del", "a")) + string(cmd("SELECT", "15")) + string(cmd("zadd", live, "2", "m")) + string(cmd("EXEC")) +
		string(cmd("SELECT", "0")) + string(cmd("hset", "fenceproxy:lock:{r}", "token", "7"))
	want := "\n\n$" + itoa(len(rdb)) + "\r\n" + rdb + string(cmd("SELECT", "9")) + string(cmd("set", "a", "1")) +
		string(cmd("PING")) + string(cmd("incr", "a")) +
		string(cmd("MULTI")) + string(cmd("del", "a")) + string(cmd("EXEC")) +
		string(cmd("SELECT", "0")) + string(cmd("hset", "fenceproxy:lock:{r}", "token", "7"))
	for _, size := range []int{1, 5, 64, len(in)} {
		got := relayInChunks(&replicaStream{own: newOwnKeys(authority.Keys("fenceproxy:lock:")), upDB: -1, downDB: -1}, []byte(in), size)
		if string(got) != want {
			t.Errorf("chunks of %d:\n got %q\nwant %q", size, got, want)
		}
	}
}
