package cluster

import (
	"bytes"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestScriptKillEveryMaster: in front of a Redis Cluster a script may be
// busy on any master; SCRIPT KILL through the proxy reaches every master's
// control connection and answers OK when one of them ended it, NOTBUSY
// when none runs one.
func TestScriptKillEveryMaster(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	busyMaster := e.cl.Masters[len(e.cl.Masters)-1]
	testenv.Dial(t, busyMaster.Addr).Do("CONFIG", "SET", "lua-time-limit", "10")
	key := st.keysOn(busyMaster, "busy:", 1)[0]
	busy := e.dial(t)
	busy.Send("EVAL", "while true do end", "1", key)
	busy.Flush()
	direct := testenv.Dial(t, busyMaster.Addr)
	for deadline := time.Now().Add(10 * time.Second); !bytes.HasPrefix(direct.Do("PING"), []byte("-BUSY")); {
		if time.Now().After(deadline) {
			t.Fatalf("the script did not get busy on %s", busyMaster.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	proxy := e.dial(t)
	if got := proxy.Do("SCRIPT", "KILL"); string(got) != "+OK\r\n" {
		t.Fatalf("SCRIPT KILL with a script busy on the last master: %q, want +OK", got)
	}
	if got, err := busy.ReadReply(); err != nil || !bytes.Contains(got, []byte("killed by user")) {
		t.Errorf("the killed script's reply: %q, %v", got, err)
	}
	if got := proxy.Do("SCRIPT", "KILL"); !bytes.HasPrefix(got, []byte("-NOTBUSY ")) {
		t.Errorf("SCRIPT KILL with none busy: %q, want -NOTBUSY", got)
	}
	if got := proxy.Do("PING"); string(got) != "+PONG\r\n" {
		t.Errorf("PING: %q", got)
	}
}
