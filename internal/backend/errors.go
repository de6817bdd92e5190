package backend

// The failures a request meets on its way to Redis and back, put in its
// reply's Err (see resp.Reply) rather than written as reply text: code on
// the way tests them with errors.Is, and the client's reply is written from
// them once, by the connection that owes it (RESPError). Neither reply names
// the backend's address; both are Redis-style, so that clients' retry logic
// recognises them.
var (
	// ErrUnavailable: Redis was unreachable; the request was not sent.
	ErrUnavailable error = &linkError{
		"backend: Redis is unreachable; the request was not sent",
		"TRYAGAIN", "fenceproxy: Redis is unreachable, retry shortly"}
	// ErrLost: the connection broke with the request on it (or Redis's
	// reply was not RESP); it may or may not have run.
	ErrLost error = &linkError{
		"backend: connection to Redis lost; the request may or may not have run",
		"ERR", "fenceproxy: lost the connection to Redis; the command may or may not have run"}
	// ErrReplyTooLarge: Redis's reply held a string longer than the proxy
	// relays (resp.MaxBulk); the command ran, its reply was dropped, and
	// the connection carries on.
	ErrReplyTooLarge error = &linkError{
		"backend: Redis's reply is too large to relay",
		"ERR", "fenceproxy: the reply holds a string over 512 MB, more than fenceproxy relays; the command ran, read the value in parts (GETRANGE, LRANGE, ...)"}
)

// linkError is a failure of the link to Redis, with the reply a client
// gets for it.
type linkError struct{ text, code, msg string }

func (e *linkError) Error() string                 { return e.text }
func (e *linkError) RESPError() (code, msg string) { return e.code, e.msg }
