package operations

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// Frictions a new user meets on a first run (issue 22, item 5).

// infoLine is field's value in an INFO reply (a bulk string of lines).
func infoLine(info []byte, field string) string {
	for _, line := range strings.Split(string(info), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// TestSecondProxyRefusesToStart: a second fenceproxy, with a data dir of
// its own, started in front of the backend a first one serves, does not
// start: it exits non-zero with one line naming the first's fence store.
// The first keeps granting. Before, the second started, wrote its member
// in the live set, and both refused every lock command.
func TestSecondProxyRefusesToStart(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	first := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	c := testenv.Dial(t, first.Addr)
	if r := c.Do("LOCK.ACQUIRE", "held", "a", "60000"); r[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE through the first = %q", r)
	}
	storeID := infoLine(c.Do("INFO", "fenceproxy"), "fence_store_id")
	if storeID == "" {
		t.Fatal("INFO fenceproxy has no fence_store_id")
	}

	code, stderr := testenv.StartFails(t, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--min-replicas", "0",
		"--backend", redis.Addr, "--data-dir", t.TempDir())
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], storeID) || !strings.Contains(lines[0], "Stop that one first") {
		t.Fatalf("second fenceproxy on a live one's backend: exit %d, stderr %q; want non-zero and one line naming store %s and what to do",
			code, stderr, storeID)
	}

	// The first never saw the second: it grants through several of its
	// heartbeat rounds (500 ms each) after the second gave up.
	for i := range 6 {
		if r := c.Do("LOCK.ACQUIRE", "after", "a", "60000"); r[0] != ':' {
			t.Fatalf("LOCK.ACQUIRE through the first, %d after the second gave up = %q, want a token", i, r)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if v := infoLine(c.Do("INFO", "fenceproxy"), "token_authority_conflict"); v != "0" {
		t.Fatalf("the first's token_authority_conflict = %q, want 0", v)
	}
}

// TestSecondProxyStartsAfterAKill9: the first fenceproxy is kill -9'd (its
// member stays in the live set until it runs out): a second one with
// another data dir waits for it to run out and starts, above its tokens.
func TestSecondProxyStartsAfterAKill9(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	first := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	tok, ok := testenv.ParseInt(testenv.Dial(t, first.Addr).Do("LOCK.ACQUIRE", "r", "a", "1000"))
	if !ok {
		t.Fatal("no token from the first")
	}
	first.Kill9()
	second := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	got, ok := testenv.ParseInt(testenv.Dial(t, second.Addr).Do("LOCK.ACQUIRE", "r2", "b", "1000"))
	if !ok || got <= tok {
		t.Fatalf("the second's token = %d (%v), want one above the first's %d", got, ok, tok)
	}
}

// TestMasterWithoutReplicaSaysSo: a master with no replica and the default
// --min-replicas 1. Every lock command is refused, and the refusal names
// --min-replicas and what 0 gives up; /readyz is not ready and says why;
// the log warns at start. Once a replica is added, locks are served and
// /readyz is ready. Before, the reply spoke only of "the token bound" and
// /readyz answered 200.
func TestMasterWithoutReplicaSaysSo(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1})
	c := testenv.Dial(t, p.Addr)
	r := string(c.Do("LOCK.ACQUIRE", "r", "a", "60000"))
	for _, want := range []string{"-NOREPLICAS fenceproxy: 0 of 1 required replicas acknowledged", "no replica", "--min-replicas 0", "fails over"} {
		if !strings.Contains(r, want) {
			t.Errorf("LOCK.ACQUIRE with no replica = %q, want it to contain %q", r, want)
		}
	}
	code, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/readyz")
	if code == 200 || !strings.Contains(body, "lock commands unavailable") || !strings.Contains(body, "--min-replicas") {
		t.Errorf("/readyz with no replica = %d %q, want not ready, saying lock commands are unavailable and naming --min-replicas", code, body)
	}
	if log := p.Log(); !strings.Contains(log, "fewer replicas connected than --min-replicas") {
		t.Errorf("the start's log has no warning that the master has fewer replicas than --min-replicas:\n%s", log)
	}

	testenv.StartReplica(t, master)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := c.Do("LOCK.ACQUIRE", "r", "a", "60000")
		code, body = testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/readyz")
		if _, ok := testenv.ParseInt(r); ok && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with a replica added: LOCK.ACQUIRE = %q, /readyz = %d %q; want a token and ready", r, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDataDirNotWritable: an existing data dir that the process may not
// write (Docker's root-owned volume, fenceproxy running as a non-root
// user) stops the start with one line that says so, names the uid, and
// says what to do; before, it said the dir was "in use by another
// fenceproxy". The tests run as root here, and root writes through any
// mode bits: the binary is run as uid 65534 (nobody) instead, on a dir
// owned by root with mode 0755 (as Docker makes a volume). Run as another
// user, the test makes the dir 0555 instead.
func TestDataDirNotWritable(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	top, err := os.MkdirTemp("", "fenceproxy-notwritable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	data := filepath.Join(top, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.BuildProxy(t), "--listen", "127.0.0.1:0", "--metrics-listen", "", "--min-replicas", "0",
		"--backend", redis.Addr, "--data-dir", data)
	uid := os.Getuid()
	if uid == 0 {
		// uid 65534 must reach the binary and the dir.
		bin := filepath.Join(top, "fenceproxy")
		copyFile(t, testenv.BuildProxy(t), bin)
		if err := os.Chmod(top, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd.Path, uid = bin, 65534
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	} else if err := os.Chmod(data, 0o555); err != nil {
		t.Fatal(err)
	}
	code, stderr := testenv.RunUntilExit(t, cmd)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	want := fmt.Sprintf("not writable by uid %d", uid)
	if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], want) ||
		!strings.Contains(lines[0], "chown") || strings.Contains(lines[0], "in use") {
		t.Fatalf("fenceproxy on a data dir it cannot write: exit %d, stderr %q; want one line saying %q and to chown it",
			code, stderr, want)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestDockerfileDataDirOwned: the image creates /data owned by the user it
// runs as, so that a volume Docker creates for it is writable by
// fenceproxy (a new volume takes the image directory's owner). Read from
// the Dockerfile: no Docker daemon runs where the tests do.
func TestDockerfileDataDirOwned(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := strings.Split(string(b), "\nFROM ")
	final := stages[len(stages)-1]
	var user, chown string
	for _, line := range strings.Split(final, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "USER":
			user = f[1]
		case len(f) >= 3 && f[0] == "COPY" && f[len(f)-1] == "/data":
			for _, opt := range f[1 : len(f)-2] {
				if v, ok := strings.CutPrefix(opt, "--chown="); ok {
					chown = v
				}
			}
		}
	}
	if user == "" || chown != user {
		t.Fatalf("the Dockerfile's final stage: USER %q, /data copied in with --chown=%q; want /data made by a COPY --chown of the USER the image runs as", user, chown)
	}
}
