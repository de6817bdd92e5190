package lockcmd

import (
	"errors"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/locks"
)

// evictableReply is the error for a grant or renewal refused because the
// resource's Redis master may evict owner records (locks.EvictableError),
// naming the policy and what the operator can do; outcome says what became
// of the request. ok is false for any other error.
func evictableReply(err error, outcome string) (reply []byte, ok bool) {
	var ev *locks.EvictableError
	if !errors.As(err, &ev) {
		return nil, false
	}
	if ev.Policy == "" {
		return redcon.AppendError(nil, "ERR fenceproxy: cannot read the Redis master's maxmemory-policy, so lock records may be evicted; "+
			outcome+". Let fenceproxy's Redis user run INFO memory (the proxy's log says what failed), or start fenceproxy with --allow-evictable-locks"), true
	}
	return redcon.AppendError(nil, "ERR fenceproxy: the Redis master's maxmemory-policy is "+ev.Policy+", which can evict lock records; "+
		outcome+". Set it to noeviction or start fenceproxy with --allow-evictable-locks"), true
}
