package persist

import (
	"errors"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

var (
	// ErrUnhealthy is returned by every call after a synced commit failed or
	// Pebble reported a fatal error (invariant 6). The process must restart.
	ErrUnhealthy = errors.New("persist: store unhealthy after a failed sync; restart required")
	// ErrLocked means another process (or another Store in this one) holds the directory.
	ErrLocked = errors.New("persist: data dir is in use by another fenceproxy")
	// ErrNotWritable means this process may not write in the directory
	// (its owner or mode, or a read-only file system).
	ErrNotWritable = errors.New("persist: data dir is not writable")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("persist: store closed")
	// ErrExhausted means the token space (1..MaxToken) is used up.
	ErrExhausted = errors.New("persist: token space exhausted")
	// ErrBadResource means a resource is empty or longer than MaxResourceLen.
	ErrBadResource = errors.New("persist: resource must be 1 to 512 bytes")
	// ErrBadToken means Reserve or Confirm got token 0 or a token not issued yet.
	ErrBadToken = errors.New("persist: token was never issued")
	// ErrCorrupt means a stored value is not an 8-byte token (tokenstate's,
	// which the max merge also returns).
	ErrCorrupt = tokenstate.ErrCorrupt
)
