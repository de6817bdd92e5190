// Command fenceproxy is a Redis proxy that adds durable, fenced locks.
//
// It listens for RESP clients, forwards every ordinary command to the
// backend Redis, and serves the lock family (LOCK.ACQUIRE, LOCK.RENEW,
// LOCK.RELEASE, FENCE.CHECK, LOCK.INFO) itself. See README.md.
//
// The command is a thin main: config.go has every setting and its default,
// server.go puts the parts together (start), serves until a signal (serve)
// and takes them down (close).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

// Exit codes: 2 for a command line that cannot be used, 1 when the proxy
// cannot start or stops accepting clients, 0 after a drain on SIGTERM.
func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) || errors.Is(err, errVersion) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "fenceproxy: %v\n", err)
		if errors.As(err, new(usageError)) {
			fmt.Fprintln(os.Stderr, "fenceproxy --help lists every flag")
		}
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fenceproxy: cannot start: %v\n", err)
		os.Exit(1)
	}
}

// run starts the proxy, serves until SIGTERM or SIGINT, and closes it.
func run(cfg config) error {
	p, err := start(cfg)
	if err != nil {
		return err
	}
	defer p.close()
	return p.serve()
}
