package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// modulePath is the module whose ./cmd/fenceproxy BuildProxy builds.
const modulePath = "github.com/fenceproxy/fenceproxy"

// buildWait bounds go build; the first build compiles Pebble.
const buildWait = 5 * time.Minute

var build struct {
	once sync.Once
	dir  string // temp dir holding the binary; removed by Main
	path string
	err  error
}

// BuildProxy builds ./cmd/fenceproxy once per test binary and returns the
// path of the binary. It finds the module root by walking up from the
// working directory to the go.mod of github.com/fenceproxy/fenceproxy.
// With FENCEPROXY_BIN set it builds nothing and returns that path.
//
// The binary lives in a temp dir that Main removes; tests that call
// BuildProxy without using Main leave one fenceproxy-testenv-* dir behind.
func BuildProxy(t testing.TB) string {
	t.Helper()
	build.once.Do(func() { build.path, build.err = buildProxy() })
	if build.err != nil {
		t.Fatalf("testenv: building fenceproxy: %v", build.err)
	}
	return build.path
}

// Main runs the tests of m and then removes what BuildProxy built. Use it
// from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

func buildProxy() (string, error) {
	if bin := os.Getenv("FENCEPROXY_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(abs); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("FENCEPROXY_BIN=%s is not an executable file", bin)
		}
		return abs, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go not found on PATH: %v", err)
	}
	dir, err := os.MkdirTemp("", "fenceproxy-testenv-")
	if err != nil {
		return "", err
	}
	build.dir = dir
	bin := filepath.Join(dir, "fenceproxy")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/fenceproxy")

	ctx, cancel := context.WithTimeout(context.Background(), buildWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On timeout end the whole group: go build runs compile and link as children.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), root, err, out)
	}
	return bin, nil
}

// moduleRoot walks up from the working directory to the directory whose
// go.mod declares modulePath.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if mod, err := modulePathOf(filepath.Join(dir, "go.mod")); err == nil && mod == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of " + modulePath + " above the working directory")
		}
		dir = parent
	}
}

// modulePathOf returns the module path declared by the go.mod at path.
func modulePathOf(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", path)
}
