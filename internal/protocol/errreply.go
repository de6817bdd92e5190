package protocol

import (
	"errors"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The reply to an error that does not know its own: the client learns that
// the proxy failed, the log says how.
const (
	internalCode = "ERR"
	internalMsg  = "fenceproxy: internal error (see the proxy's log)"
)

// appendErr appends the client's reply for err, the Err of a reply: this
// is the one place where an error value becomes RESP bytes. An error that
// knows its reply (resp.CodedError: resp.Error, the backend's failures, a
// refused node...) gets it; any other is a bug or a failure nobody named,
// and is logged (at most once a second) and answered as an internal error,
// so that no Go error text reaches a client. A coded error whose reply
// sends the client to the log (resp.LoggedError) is logged too, at most
// once a second.
func (s *Server) appendErr(b []byte, err error) []byte {
	var coded resp.CodedError
	if errors.As(err, &coded) {
		var logged resp.LoggedError
		if errors.As(err, &logged) && logged.LogDetail() != "" {
			s.detailLog.Error(s.Logger, logged.LogDetail(), "err", err)
		}
		code, msg := coded.RESPError()
		return resp.AppendError(b, code, msg)
	}
	now := time.Now().Unix()
	if last := s.lastErrLog.Load(); last != now && s.lastErrLog.CompareAndSwap(last, now) {
		s.Logger.Error("answered a client with an internal error", "err", err)
	}
	return resp.AppendError(b, internalCode, internalMsg)
}
