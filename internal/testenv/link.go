package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Direction names which bytes of a Link a fault acts on.
type Direction int

const (
	// BothWays: requests and replies.
	BothWays Direction = iota
	// Upstream: bytes from the Link's clients to its upstream (requests).
	Upstream
	// Downstream: bytes from the upstream back to the clients (replies).
	Downstream
)

func (d Direction) String() string {
	switch d {
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	default:
		return "both ways"
	}
}

// streams are toxiproxy's names of the directions d covers.
func (d Direction) streams() []string {
	switch d {
	case Upstream:
		return []string{"upstream"}
	case Downstream:
		return []string{"downstream"}
	default:
		return []string{"upstream", "downstream"}
	}
}

// holdFor is the latency a Cut gives its toxic: longer than any test, so
// bytes move again only when Heal removes it.
const holdFor = 24 * time.Hour

// Link is a fault-injecting TCP relay on loopback: clients connect to Addr
// and each connection is relayed to Upstream, through Shopify's toxiproxy
// used as a library (no toxiproxy server, no HTTP API). Its faults act on
// every connection, those open when the fault starts and those made while it
// lasts, until Heal.
//
// Which toxiproxy toxic really stops a direction (checked against the
// toxics' source, v2.12.0, and by this package's tests): "latency" with a
// latency longer than the test holds every byte and, when the toxic is
// removed, delivers what it held in order (a partition that heals before
// TCP gives up: Cut); "timeout" with timeout 0 discards the bytes and, when
// removed, closes the connections it cut (a partition that outlasted TCP:
// Drop). Neither closes a connection while it lasts. "bandwidth" at rate 0
// holds bytes too, but only by an artefact (it forwards an empty chunk
// every 100ms and the data when removed) and it logs through zerolog's
// global logger; "limit_data" and "reset_peer" close the connection, so
// both directions end at once: none of those is a one-way cut.
//
// A Link's listener keeps accepting during a cut, and it still dials the
// upstream for each new client: a client's connect succeeds and its first
// bytes wait, where a real partition would make the connect wait. Methods
// that take a testing.TB call t.Fatalf and belong on the test's goroutine.
type Link struct {
	Addr     string // 127.0.0.1:<port> the Link listens on
	Upstream string // where it relays each connection

	proxy *toxiproxy.Proxy

	mu     sync.Mutex
	toxics []string // names of the toxics in place
	n      int      // toxics ever added, for unique names
}

var linkServer = sync.OnceValue(func() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
})

// StartLink starts a Link on a free loopback port relaying to upstream
// (which need not be up yet: each client's connection is dialled when it
// arrives, and closed at once if the upstream refuses it). t.Cleanup closes
// it and every connection through it.
func StartLink(t testing.TB, upstream string) *Link {
	t.Helper()
	// The port comes from FreePort, not from the kernel's ":0": a port
	// FreePort handed out is only bound when its server starts, and the
	// kernel would offer it again meanwhile (CI saw a Link take the port
	// a tier node was about to bind for Raft).
	var err error
	for range 10 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
		p := toxiproxy.NewProxy(linkServer(), "link-"+upstream, addr, upstream)
		if err = p.Start(); err == nil {
			l := &Link{Addr: p.Listen, Upstream: upstream, proxy: p}
			t.Cleanup(l.Close)
			return l
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("testenv: StartLink to %s: %v", upstream, err)
	return nil
}

// Port is the port of Addr.
func (l *Link) Port() int {
	_, port, _ := net.SplitHostPort(l.Addr)
	n, _ := strconv.Atoi(port)
	return n
}

// Cut holds every byte going dir until Heal, which then delivers them in
// order: the connections stay open and nothing is lost, as in a network
// partition that heals before TCP's retransmissions give up. A peer that
// times out and closes its side meanwhile has that close delivered at Heal
// too.
func (l *Link) Cut(t testing.TB, dir Direction) {
	t.Helper()
	l.add(t, "cut", "latency", dir, fmt.Sprintf(`{"latency":%d}`, holdFor.Milliseconds()))
}

// Slice delivers what goes dir in chunks of size bytes, delay apart, until
// Heal: a reply that comes in several reads.
func (l *Link) Slice(t testing.TB, dir Direction, size int, delay time.Duration) {
	t.Helper()
	l.add(t, "slice", "slicer", dir, fmt.Sprintf(`{"average_size":%d,"size_variation":0,"delay":%d}`, size, delay.Microseconds()))
}

// Drop discards every byte going dir until Heal, which then closes every
// connection that was open during the drop: a partition that lasted longer
// than TCP would wait, whose connections are dead when it heals.
// Connections made after Heal work.
func (l *Link) Drop(t testing.TB, dir Direction) {
	t.Helper()
	l.add(t, "drop", "timeout", dir, `{"timeout":0}`)
}

// Delay adds d to every chunk of bytes going dir (on top of any Delay
// already in place) until Heal.
func (l *Link) Delay(t testing.TB, dir Direction, d time.Duration) {
	t.Helper()
	l.add(t, "delay", "latency", dir, fmt.Sprintf(`{"latency":%d}`, d.Milliseconds()))
}

func (l *Link) add(t testing.TB, what, typ string, dir Direction, attrs string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, stream := range dir.streams() {
		l.n++
		name := fmt.Sprintf("%s-%s-%d", what, stream, l.n)
		js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
		if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			t.Fatalf("testenv: Link %s: adding %s toxic %s: %v", l.Addr, typ, js, err)
		}
		l.toxics = append(l.toxics, name)
	}
}

// Heal removes every fault: held bytes are delivered, dropped connections
// closed, delays end.
func (l *Link) Heal(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	// Last added first: each removal reconnects the chain around one toxic.
	for i := len(l.toxics) - 1; i >= 0; i-- {
		if err := l.proxy.Toxics.RemoveToxic(context.Background(), l.toxics[i]); err != nil {
			t.Fatalf("testenv: Link %s: removing toxic %s: %v", l.Addr, l.toxics[i], err)
		}
	}
	l.toxics = nil
}

// Restart closes every connection through the Link and listens again on
// the same address: to its clients, the upstream restarted (their open
// connections end, new ones work). Faults in place stay.
func (l *Link) Restart(t testing.TB) {
	t.Helper()
	l.proxy.Stop()
	if err := l.proxy.Start(); err != nil {
		t.Fatalf("testenv: Link %s: listening again: %v", l.Addr, err)
	}
}

// Faulty reports whether any fault is in place.
func (l *Link) Faulty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.toxics) > 0
}

// Close stops the listener and closes every connection through the Link.
// Closing twice is harmless.
func (l *Link) Close() { l.proxy.Stop() }
