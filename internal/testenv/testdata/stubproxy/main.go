// Command stubproxy stands in for fenceproxy in testenv's own tests: it takes
// fenceproxy's flags, forwards every connection byte for byte to --backend,
// and exits 0 on SIGTERM.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "", "")
	backend := flag.String("backend", "", "")
	dataDir := flag.String("data-dir", "", "")
	flag.Int("min-replicas", 0, "")
	flag.Duration("replica-timeout", 100*time.Millisecond, "")
	metrics := flag.String("metrics-listen", "", "")
	exitAfter := flag.Duration("exit-after", 0, "exit 3 after this long")
	flag.Parse()

	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "stubproxy: data dir:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stubproxy:", err)
		os.Exit(1)
	}
	if *metrics != "" {
		if mln, err := net.Listen("tcp", *metrics); err == nil {
			defer mln.Close()
		}
	}
	fmt.Println("stubproxy: listening on", *listen, "backend", *backend, "pid", os.Getpid())
	if *exitAfter > 0 {
		time.AfterFunc(*exitAfter, func() { os.Exit(3) })
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forward(c, *backend)
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	fmt.Println("stubproxy: SIGTERM, exiting")
	os.Exit(0)
}

func forward(c net.Conn, backend string) {
	defer c.Close()
	b, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer b.Close()
	go io.Copy(b, c)
	io.Copy(c, b)
}
