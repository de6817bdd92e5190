package cluster

import "errors"

// ErrOutcomeUnknown means the connection broke while a write was in flight:
// it may or may not have been applied, and its acknowledgements are unknown.
var ErrOutcomeUnknown = errors.New("cluster: connection to Redis lost; write outcome unknown")

// ErrUnavailable means Redis could not be reached; the write was not sent.
var ErrUnavailable = errors.New("cluster: Redis is unreachable; the write was not sent")
