package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// tlsHint returns what to change when err looks like a TLS mismatch between
// the proxy and Redis, appended to the start-up error so the operator
// reads the fix beside the cause; "" otherwise. withTLS says whether the
// proxy dialled with TLS.
func tlsHint(err error, withTLS bool) string {
	if !withTLS {
		// Redis's TLS port drops a client whose first bytes are not a
		// TLS handshake.
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return " (if Redis speaks TLS on this port, add --backend-tls)"
		}
		return ""
	}
	var unknownCA x509.UnknownAuthorityError
	var badName x509.HostnameError
	var notTLS tls.RecordHeaderError
	var netErr net.Error
	msg := err.Error()
	switch {
	case errors.As(err, &unknownCA):
		return " (Redis's certificate is not signed by a CA the proxy trusts: check --backend-tls-ca-cert-file)"
	case errors.As(err, &badName):
		return " (Redis's certificate does not name this host: set --backend-tls-server-name to a name it holds)"
	case errors.As(err, &notTLS):
		return " (Redis does not speak TLS on this port: remove --backend-tls, or use its tls-port)"
	case errors.As(err, &netErr) && netErr.Timeout():
		// A plaintext Redis waits for the end of a line that the
		// handshake's binary bytes may never hold.
		return " (no answer to the TLS handshake: does Redis speak TLS on this port?)"
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"),
		strings.Contains(msg, "unknown certificate authority"):
		return " (Redis wants a client certificate it trusts: check --backend-tls-cert-file and --backend-tls-key-file)"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		// In TLS 1.3 Redis judges the client's certificate after the
		// client's handshake is done; its alert may be lost to the reset.
		return " (Redis closed the connection after the TLS handshake: if it wants client certificates (tls-auth-clients), check --backend-tls-cert-file and --backend-tls-key-file)"
	}
	return ""
}
