// Command holder is the paused lock holder of the fault suite: a separate
// process that the suite stops with SIGSTOP while it holds a lease, so its
// pause is a real one (its connection, its buffered requests and its stale
// token all survive it), and resumes with SIGCONT.
//
// It reads one JSON request per line on stdin, {"addr": "host:port",
// "args": ["LOCK.ACQUIRE", ...]}, sends args to addr over one RESP
// connection (dialled again when addr changes or after an error), and writes
// one JSON line per request on stdout: {"reply": "<raw RESP>"} or {"err":
// "..."} when the outcome is unknown (connection error or timeout). It exits
// at the end of stdin.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

type request struct {
	Addr string   `json:"addr"`
	Args []string `json:"args"`
}

type response struct {
	Reply string `json:"reply,omitempty"`
	Err   string `json:"err,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	var conn *testenv.Conn
	var connAddr string
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintf(os.Stderr, "holder: bad request %q: %v\n", in.Bytes(), err)
			os.Exit(2)
		}
		var resp response
		if conn == nil || connAddr != req.Addr {
			if conn != nil {
				conn.Close()
			}
			var err error
			conn, err = testenv.TryDial(req.Addr, 3*time.Second)
			connAddr = req.Addr
			if err != nil {
				conn = nil
				resp.Err = "dial: " + err.Error()
			}
		}
		if conn != nil {
			reply, err := conn.TryDo(req.Args...)
			if err != nil {
				resp.Err = err.Error()
				conn.Close()
				conn = nil
			} else {
				resp.Reply = string(reply)
			}
		}
		if err := out.Encode(resp); err != nil {
			os.Exit(1)
		}
	}
}
