package persist

import (
	"errors"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

var (
	// ErrUnhealthy is returned by every call after a synced commit failed or
	// Pebble reported a fatal error (invariant 6). The process must restart.
	ErrUnhealthy error = &clientError{text: "persist: store unhealthy after a failed sync; restart required", code: "ERR", reply: replyCannotWrite, log: logCannotWrite}
	// ErrLocked means another process (or another Store in this one) holds the directory.
	ErrLocked = errors.New("persist: data dir is in use by another fenceproxy")
	// ErrNotWritable means this process may not write in the directory
	// (its owner or mode, or a read-only file system).
	ErrNotWritable = errors.New("persist: data dir is not writable")
	// ErrClosed is returned by calls made after Close.
	ErrClosed error = &clientError{text: "persist: store closed", code: "ERR", reply: replyCannotWrite, log: logCannotWrite}
	// ErrExhausted means the token space (1..MaxToken) is used up.
	ErrExhausted error = &clientError{text: "persist: token space exhausted", code: "ERR",
		reply: "fenceproxy: the token space is exhausted; no token was issued"}
	// ErrBadResource means a resource is empty or longer than MaxResourceLen.
	ErrBadResource = errors.New("persist: resource must be 1 to 512 bytes")
	// ErrBadToken means Reserve or Confirm got token 0 or a token not issued yet.
	ErrBadToken = errors.New("persist: token was never issued")
	// ErrCorrupt means a stored value is not an 8-byte token (tokenstate's,
	// which the max merge also returns).
	ErrCorrupt = tokenstate.ErrCorrupt
)

const (
	replyCannotWrite = "fenceproxy: the fence store cannot write to disk; no token was issued (see the proxy's log)"
	logCannotWrite   = "fence store cannot issue tokens"
)

// clientError is an error a lock command's client is answered with: it
// implements resp.CodedError, so the command layer writes its reply
// ("-code reply") without knowing this package. The reply says what the
// client can do and leaves the detail to the proxy's log.
type clientError struct {
	text        string // Error(), for the log
	code, reply string
	log         string // LogDetail: "" for none
}

func (e *clientError) Error() string { return e.text }

// RESPError is the client's error reply (resp.CodedError).
func (e *clientError) RESPError() (code, msg string) { return e.code, e.reply }

// LogDetail is the line the proxy's log gets for the error, "" for none
// (resp.LoggedError): a reply that sends the client to the log has its
// detail (the error, with its cause) logged there, under this line.
func (e *clientError) LogDetail() string { return e.log }
