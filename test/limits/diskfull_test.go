package limits

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// storeCannotWrite is the reply docs/operating.md gives when the fence store cannot sync.
const storeCannotWrite = "-ERR fenceproxy: the fence store cannot write to disk; no token was issued (see the proxy's log)\r\n"

// smallDisk mounts a tmpfs of size bytes on a new directory and unmounts it
// when the test ends; it skips the test where mounting is not permitted.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.Itoa(size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file until the filesystem is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for len(chunk) > 0 {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			chunk = chunk[:len(chunk)/2] // top up the last pages
		}
	}
	return path
}

// TestFenceStoreDiskFull: the fence store's filesystem fills up under a
// running proxy. Lock grants then get the documented error and never a
// token; the proxy logs why and reports not ready; ordinary commands still
// work. Freeing the disk does not bring grants back (fail-stop: after a
// failed fsync what is in memory may not be on disk); a restart does, and
// every token handed out before the failure is still known and below every
// new one.
func TestFenceStoreDiskFull(t *testing.T) {
	disk := smallDisk(t, 16<<20)
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, DataDir: filepath.Join(disk, "data")})
	c := testenv.Dial(t, p.Addr)

	granted := map[string]int64{}
	acquire := func(resource string) []byte {
		r := c.Do("LOCK.ACQUIRE", resource, "owner", "600000")
		if r[0] == ':' {
			granted[resource] = token(t, r)
		}
		return r
	}
	if r := acquire("before-full"); r[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE with room on disk = %q", r)
	}

	filler := fill(t, disk)
	// Pebble's log may still have room in pages it holds: grants go on
	// until a write needs a new one.
	var failed string
	for i := 0; failed == "" && i < 100000; i++ {
		resource := fmt.Sprintf("full-%d", i)
		switch r := acquire(resource); {
		case r[0] == ':':
		case string(r) == storeCannotWrite:
			failed = resource
		default:
			t.Fatalf("LOCK.ACQUIRE on a full disk = %q, want a token or %q", r, storeCannotWrite)
		}
	}
	if failed == "" {
		t.Fatalf("100000 grants on a full disk all succeeded")
	}
	t.Logf("%d grants succeeded before the first failure", len(granted))
	if !logHas(p, "fence store is now unhealthy") || !logHas(p, "no space left on device") {
		t.Errorf("the proxy's log does not say the fence store failed for lack of space:\n%s", p.Log())
	}
	for _, resource := range []string{failed, "full-next", "before-full"} {
		if r := c.Do("LOCK.ACQUIRE", resource, "other", "600000"); r[0] == ':' {
			t.Errorf("LOCK.ACQUIRE %s after the failure = %q, want no token", resource, r)
		}
	}
	// A client retrying in a loop does not flood the log: one line a second.
	start := time.Now()
	for range 300 {
		if r := c.Do("LOCK.ACQUIRE", "retried", "owner", "600000"); string(r) != storeCannotWrite {
			t.Fatalf("LOCK.ACQUIRE after the failure = %q", r)
		}
	}
	lines := strings.Count(p.Log(), "fence store cannot issue tokens")
	if most := int(time.Since(start)/time.Second) + 3; lines > most {
		t.Errorf("%d log lines for the fence store's failure within %v, want at most one a second", lines, time.Since(start))
	}
	if code, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/readyz"); code != 503 || !strings.Contains(body, "fence store") {
		t.Errorf("/readyz with the fence store failed = %d %q, want 503 naming the fence store", code, body)
	}
	if r := c.Do("SET", "k", "v"); string(r) != "+OK\r\n" {
		t.Errorf("SET with the fence store failed = %q", r)
	}

	// Room again: still no token until a restart, as the README says.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if r := c.Do("LOCK.ACQUIRE", "after-free", "owner", "600000"); string(r) != storeCannotWrite {
		t.Errorf("LOCK.ACQUIRE after the disk was freed = %q, want %q until a restart", r, storeCannotWrite)
	}

	// A crash and a restart: every token handed out is still the newest
	// for its resource, and new ones are above them all.
	p.Restart(t)
	c = testenv.Dial(t, p.Addr)
	var highest int64
	for resource, tok := range granted {
		if r := c.Do("FENCE.CHECK", resource, strconv.FormatInt(tok, 10)); string(r) != ":1\r\n" {
			t.Errorf("FENCE.CHECK %s %d after the restart = %q: a token handed out was lost", resource, tok, r)
		}
		highest = max(highest, tok)
	}
	for _, resource := range []string{"after-restart", failed} {
		r := c.Do("LOCK.ACQUIRE", resource, "owner-2", "600000")
		if r[0] != ':' {
			// The failed grant's owner record may be in Redis: then it is busy.
			if resource == failed && testenv.IsNull(r) {
				continue
			}
			t.Fatalf("LOCK.ACQUIRE %s after the restart = %q", resource, r)
		}
		if tok := token(t, r); tok <= highest {
			t.Errorf("token %d after the restart <= %d handed out before", tok, highest)
		}
	}
}
