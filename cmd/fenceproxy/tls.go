package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// tlsFlags are the TLS settings, for clients (named as Redis names its own)
// and for the backend.
type tlsFlags struct {
	listen           string
	certFile         string
	keyFile          string
	caFile           string
	authClients      string
	handshakeTimeout time.Duration

	backend           bool
	sentinel          bool // TLS to the Sentinels too, with the backend's files
	backendCAFile     string
	backendCertFile   string
	backendKeyFile    string
	backendServerName string
}

// register adds the flags, with f's values (defaultConfig's) as defaults.
func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "tls-listen", f.listen, "`host:port` where TLS clients connect (beside --listen; --listen \"\" turns plaintext off)")
	fs.StringVar(&f.certFile, "tls-cert-file", f.certFile, "PEM `file` with the certificate the proxy shows TLS clients (and its chain)")
	fs.StringVar(&f.keyFile, "tls-key-file", f.keyFile, "PEM `file` with the private key of --tls-cert-file")
	fs.StringVar(&f.caFile, "tls-ca-cert-file", f.caFile, "PEM `file` of the CA(s) that sign client certificates")
	fs.StringVar(&f.authClients, "tls-auth-clients", f.authClients, "client certificates: yes (required), optional (verified if sent) or no; default yes with --tls-ca-cert-file, else no")
	fs.DurationVar(&f.handshakeTimeout, "tls-handshake-timeout", f.handshakeTimeout, "how long a TLS client may take to finish its handshake")
	fs.BoolVar(&f.backend, "backend-tls", f.backend, "speak TLS to every backend node")
	fs.BoolVar(&f.sentinel, "sentinel-tls", f.sentinel, "speak TLS to the --sentinel Sentinels, with the --backend-tls-... CA, certificate and server name")
	fs.StringVar(&f.backendCAFile, "backend-tls-ca-cert-file", f.backendCAFile, "PEM `file` of the CA(s) that sign Redis's certificates (default: the system's)")
	fs.StringVar(&f.backendCertFile, "backend-tls-cert-file", f.backendCertFile, "PEM `file` with the client certificate shown to Redis (for its tls-auth-clients)")
	fs.StringVar(&f.backendKeyFile, "backend-tls-key-file", f.backendKeyFile, "PEM `file` with the private key of --backend-tls-cert-file")
	fs.StringVar(&f.backendServerName, "backend-tls-server-name", f.backendServerName, "`name` Redis's certificate must hold, also sent as SNI (default: the host of each node's address)")
}

// check validates the combination; files are read later, by load.
func (f *tlsFlags) check(listen string) error {
	clientFlags := f.certFile != "" || f.keyFile != "" || f.caFile != "" || f.authClients != ""
	switch {
	case listen == "" && f.listen == "":
		return errors.New("--listen is empty and --tls-listen is not set: clients could not connect anywhere")
	case f.listen == "" && clientFlags:
		return errors.New("--tls-cert-file, --tls-key-file, --tls-ca-cert-file and --tls-auth-clients are for TLS clients and need --tls-listen (for Redis, use the --backend-tls-... flags)")
	case f.listen != "" && (f.certFile == "" || f.keyFile == ""):
		return errors.New("--tls-listen needs --tls-cert-file and --tls-key-file")
	case f.handshakeTimeout <= 0:
		return errors.New("--tls-handshake-timeout must be positive")
	}
	switch f.authClients {
	case "":
		f.authClients = "no"
		if f.caFile != "" {
			f.authClients = "yes"
		}
	case "yes", "optional":
		if f.caFile == "" {
			return fmt.Errorf("--tls-auth-clients %s needs --tls-ca-cert-file, the CA client certificates are verified with", f.authClients)
		}
	case "no":
	default:
		return fmt.Errorf("--tls-auth-clients must be yes, no or optional, not %q", f.authClients)
	}
	backendFlags := f.backendCAFile != "" || f.backendCertFile != "" || f.backendKeyFile != "" || f.backendServerName != ""
	switch {
	case backendFlags && !f.backend && !f.sentinel:
		return errors.New("--backend-tls-... flags are given but --backend-tls is not: add --backend-tls to speak TLS to Redis")
	case (f.backendCertFile == "") != (f.backendKeyFile == ""):
		return errors.New("--backend-tls-cert-file and --backend-tls-key-file go together")
	}
	return nil
}

// clientTLS is the TLS configuration for clients. Each handshake takes the
// configuration of the moment from an atomic pointer, so a SIGHUP that
// re-reads the files changes the certificate new clients see without a
// restart (connections already open keep theirs).
type clientTLS struct {
	f       *tlsFlags
	current atomic.Pointer[tls.Config]
}

// serverConfig reads the certificate, key and CA and returns the
// configuration for the listener; the error names the flag at fault.
func (f *tlsFlags) serverConfig(logger *slog.Logger) (*tls.Config, error) {
	c := &clientTLS{f: f}
	cfg, err := c.load()
	if err != nil {
		return nil, err
	}
	c.current.Store(cfg)
	c.reloadOnHangup(logger)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.current.Load(), nil
		},
	}, nil
}

func (c *clientTLS) load() (*tls.Config, error) {
	f := c.f
	pair, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s, --tls-key-file %s: %v", f.certFile, f.keyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if f.caFile != "" {
		if cfg.ClientCAs, err = loadCAs(f.caFile); err != nil {
			return nil, fmt.Errorf("--tls-ca-cert-file %s: %v", f.caFile, err)
		}
	}
	switch f.authClients {
	case "yes":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	case "optional":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// reloadOnHangup re-reads the files on SIGHUP; if they are unusable the
// old configuration stays and the error is logged.
func (c *clientTLS) reloadOnHangup(logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			cfg, err := c.load()
			if err != nil {
				logger.Error("SIGHUP: TLS files not reloaded; clients still get the previous certificate", "err", err)
				continue
			}
			c.current.Store(cfg)
			logger.Info("SIGHUP: TLS certificate, key and CA reloaded", "cert", c.f.certFile)
		}
	}()
}

// backendConfig is the TLS configuration for connections to Redis, nil
// without --backend-tls.
func (f *tlsFlags) backendConfig() (*tls.Config, error) {
	if !f.backend {
		return nil, nil
	}
	return f.redisConfig()
}

// sentinelConfig is the TLS configuration for connections to the
// Sentinels, nil without --sentinel-tls.
func (f *tlsFlags) sentinelConfig() (*tls.Config, error) {
	if !f.sentinel {
		return nil, nil
	}
	return f.redisConfig()
}

// redisConfig is the client side of TLS to Redis and its Sentinels, from
// the --backend-tls-... files.
func (f *tlsFlags) redisConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.backendServerName}
	if f.backendCAFile != "" {
		cas, err := loadCAs(f.backendCAFile)
		if err != nil {
			return nil, fmt.Errorf("--backend-tls-ca-cert-file %s: %v", f.backendCAFile, err)
		}
		cfg.RootCAs = cas
	}
	if f.backendCertFile != "" {
		pair, err := tls.LoadX509KeyPair(f.backendCertFile, f.backendKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--backend-tls-cert-file %s, --backend-tls-key-file %s: %v", f.backendCertFile, f.backendKeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// loadCAs reads a PEM file of one or more CA certificates.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

// addrOf is ln's address for the log, "" for a listener turned off.
func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}
