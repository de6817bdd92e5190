package upstream

import (
	"errors"

	"github.com/fenceproxy/fenceproxy/internal/backend"
)

// ErrOutcomeUnknown means the connection broke while a write was in flight:
// it may or may not have been applied, and its acknowledgements are unknown.
var ErrOutcomeUnknown = errors.New("cluster: connection to Redis lost; write outcome unknown")

// ErrUnavailable means Redis could not be reached; the request was not
// sent. It is the backend's own error: a reply that never left carries it.
var ErrUnavailable = backend.ErrUnavailable
