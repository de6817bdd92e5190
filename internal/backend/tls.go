package backend

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"
)

// ForAddr returns cfg ready to dial addr: when cfg names no server, the
// certificate is checked against addr's host (an IP address is matched
// against the certificate's IP SANs), as crypto/tls's own Dial does. In a
// Redis Cluster each node is then checked under its own address.
func ForAddr(cfg *tls.Config, addr string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	cfg = cfg.Clone()
	cfg.ServerName = host
	return cfg
}

// tlsHandshake wraps nc in TLS and completes the handshake within timeout,
// so a dial fails at once, with the reason, when the certificate is not
// trusted rather than at the first request. nc is closed on failure.
func tlsHandshake(nc net.Conn, cfg *tls.Config, addr string, timeout time.Duration) (net.Conn, error) {
	tc := tls.Client(nc, ForAddr(cfg, addr))
	nc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	nc.SetDeadline(time.Time{})
	return tc, nil
}
