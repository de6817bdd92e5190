package fanout

import (
	"bytes"
	"strconv"
)

// Redirect is what a master's error reply says of a request it did not
// run: to go to another master (Moved, Ask), to go again once the cluster
// settles (Retry), or nothing of the kind (NotRedirect: the reply is the
// request's answer).
type Redirect int

const (
	NotRedirect Redirect = iota
	Moved                // -MOVED slot addr: the slot's master is addr
	Ask                  // -ASK slot addr: this once, at addr (a slot migrating)
	Retry                // -TRYAGAIN, -CLUSTERDOWN
)

// slotCount is the number of hash slots of Redis Cluster.
const slotCount = 16384

// RedirectOf classifies an error reply that a request survives by going
// elsewhere or again.
func RedirectOf(reply []byte) Redirect {
	if len(reply) < 4 || reply[0] != '-' {
		return NotRedirect
	}
	switch {
	case bytes.HasPrefix(reply, []byte("-MOVED ")):
		return Moved
	case bytes.HasPrefix(reply, []byte("-ASK ")):
		return Ask
	case bytes.HasPrefix(reply, []byte("-TRYAGAIN")), bytes.HasPrefix(reply, []byte("-CLUSTERDOWN")):
		return Retry
	}
	return NotRedirect
}

// Redirected reports whether an error reply from a master means the request
// did not run there and may go again once the topology is known (MOVED,
// ASK, TRYAGAIN, CLUSTERDOWN).
func Redirected(reply []byte) bool { return RedirectOf(reply) != NotRedirect }

// ParseRedirect reads "-MOVED 3999 127.0.0.1:6381\r\n" (or -ASK): slot -1
// if it names no valid slot.
func ParseRedirect(reply []byte) (slot int, addr string) {
	f := bytes.Fields(reply)
	if len(f) < 3 {
		return -1, ""
	}
	slot, err := strconv.Atoi(string(f[1]))
	if err != nil || slot < 0 || slot >= slotCount {
		return -1, ""
	}
	return slot, string(f[2])
}
