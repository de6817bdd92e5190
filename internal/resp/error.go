package resp

import "strings"

// Error is an error reply: its code, the first word ("ERR", "WRONGTYPE",
// "NOREPLICAS"), and the rest. It is what an error reply Redis sent becomes
// when the proxy reads it for its own use (Parse), and what the proxy
// answers with for a Redis-style refusal of its own.
type Error struct {
	Code string
	Msg  string
}

// NewError is the Error of an error reply's text (without its "-" and
// CRLF): "WRONGTYPE Operation against a key" has the code WRONGTYPE.
func NewError(text string) Error {
	code, msg, _ := strings.Cut(text, " ")
	return Error{Code: code, Msg: msg}
}

// Error is the reply's text, as Redis wrote it.
func (e Error) Error() string {
	if e.Msg == "" {
		return e.Code
	}
	return e.Code + " " + e.Msg
}

// RESPError is the error's reply (see CodedError).
func (e Error) RESPError() (code, msg string) { return e.Code, e.Msg }

// A CodedError is an error that knows the error reply a client gets for
// it: a Redis-style code and a message that tells the client what to do
// (and names no address nor any secret). A Reply's Err that is one becomes
// that reply; any other is answered as an internal error.
type CodedError interface {
	error
	RESPError() (code, msg string)
}

// A LoggedError is a CodedError whose reply sends the client to the
// proxy's log ("see the proxy's log"): where its reply is written, the
// line LogDetail gives ("" for none) is logged with the error and its
// cause, at most once a second.
type LoggedError interface {
	CodedError
	LogDetail() string
}

// ErrorReply reports whether reply is an error reply, and which.
func ErrorReply(reply []byte) (Error, bool) {
	if len(reply) == 0 || reply[0] != '-' {
		return Error{}, false
	}
	return NewError(strings.TrimSpace(string(reply[1:]))), true
}

// AppendError appends the error reply "-code msg\r\n" to b, CR and LF in
// either turned into spaces, as Redis turns them.
func AppendError(b []byte, code, msg string) []byte {
	b = append(b, '-')
	b = appendLine(b, code)
	if msg != "" {
		b = append(b, ' ')
		b = appendLine(b, msg)
	}
	return append(b, '\r', '\n')
}

func appendLine(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}
