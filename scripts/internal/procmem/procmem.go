// Package procmem reads a process's memory from /proc, for the benchmark
// tools that report fenceproxy's RSS.
package procmem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RSS returns VmRSS and VmHWM (the peak) of pid in KiB.
func RSS(pid int) (cur, peak int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = v
		case "VmHWM:":
			peak = v
		}
	}
	if cur == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return cur, peak, nil
}

// MiB converts KiB to MiB.
func MiB(kib int64) float64 { return float64(kib) / 1024 }
