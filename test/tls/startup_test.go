package tls_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestStartupErrors: every unusable TLS setting, and every TLS mismatch
// with Redis, stops the start with a non-zero exit and one line on stderr
// that names the flag to fix.
func TestStartupErrors(t *testing.T) {
	certs := testenv.MakeCerts(t)
	stranger := testenv.MakeCerts(t)
	plainRedis := testenv.StartRedis(t, testenv.RedisOptions{})
	tlsRedis := testenv.StartTLSRedis(t, certs, nil)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644)
	dir := t.TempDir()

	tlsListen := func(extra ...string) []string {
		return append([]string{"--backend", plainRedis.Addr, "--tls-listen", "127.0.0.1:0"}, extra...)
	}
	backend := func(addr string, extra ...string) []string {
		return append([]string{"--backend", addr}, extra...)
	}
	cases := []struct {
		name, want string
		args       []string
	}{
		// Flags that do not go together.
		{"tls-listen without certificate", "--tls-listen needs --tls-cert-file and --tls-key-file", tlsListen()},
		{"certificate without tls-listen", "need --tls-listen", backend(plainRedis.Addr, "--tls-cert-file", certs.ServerCert)},
		{"no listener at all", "--listen is empty", backend(plainRedis.Addr, "--listen", "")},
		{"auth-clients yes without CA", "--tls-auth-clients yes needs --tls-ca-cert-file",
			tlsListen("--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey, "--tls-auth-clients", "yes")},
		{"auth-clients misspelt", "--tls-auth-clients must be yes, no or optional",
			tlsListen("--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey, "--tls-auth-clients", "maybe")},
		{"backend flag without backend-tls", "add --backend-tls", backend(plainRedis.Addr, "--backend-tls-ca-cert-file", certs.CAFile)},
		{"backend certificate without key", "--backend-tls-cert-file and --backend-tls-key-file go together",
			backend(tlsRedis.Addr, "--backend-tls", "--backend-tls-cert-file", certs.ClientCert)},

		// Files that cannot be used.
		{"certificate missing", "--tls-cert-file", tlsListen("--tls-cert-file", filepath.Join(dir, "none.crt"), "--tls-key-file", certs.ServerKey)},
		{"certificate unreadable", "is a directory", tlsListen("--tls-cert-file", dir, "--tls-key-file", certs.ServerKey)},
		{"certificate not PEM", "--tls-cert-file", tlsListen("--tls-cert-file", notPEM, "--tls-key-file", certs.ServerKey)},
		{"key does not match", "private key does not match public key", tlsListen("--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ClientKey)},
		{"CA not PEM", "--tls-ca-cert-file", tlsListen("--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey, "--tls-ca-cert-file", notPEM)},
		{"backend CA missing", "--backend-tls-ca-cert-file", backend(tlsRedis.Addr, "--backend-tls", "--backend-tls-ca-cert-file", filepath.Join(dir, "none.crt"))},
		{"backend key does not match", "--backend-tls-key-file", backend(tlsRedis.Addr, "--backend-tls", "--backend-tls-ca-cert-file", certs.CAFile,
			"--backend-tls-cert-file", certs.ClientCert, "--backend-tls-key-file", certs.ServerKey)},

		// TLS mismatches with Redis.
		{"backend CA wrong", "check --backend-tls-ca-cert-file", backend(tlsRedis.Addr, "--backend-tls", "--backend-tls-ca-cert-file", stranger.CAFile,
			"--backend-tls-cert-file", certs.ClientCert, "--backend-tls-key-file", certs.ClientKey)},
		{"no client certificate for Redis", "check --backend-tls-cert-file", backend(tlsRedis.Addr, "--backend-tls", "--backend-tls-ca-cert-file", certs.CAFile)},
		{"client certificate Redis does not trust", "check --backend-tls-cert-file", backend(tlsRedis.Addr, "--backend-tls", "--backend-tls-ca-cert-file", certs.CAFile,
			"--backend-tls-cert-file", stranger.ClientCert, "--backend-tls-key-file", stranger.ClientKey)},
		{"server name not in certificate", "set --backend-tls-server-name", backend(tlsRedis.Addr, append(certs.BackendArgs(), "--backend-tls-server-name", "redis.example")...)},
		{"TLS to a plaintext Redis", "TLS", backend(plainRedis.Addr, certs.BackendArgs()...)},
		{"plaintext to a TLS Redis", "add --backend-tls", backend(tlsRedis.Addr)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", t.TempDir()}, tc.args...)
			code, stderr := testenv.StartFails(t, args...)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; stderr: %q", stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr = %q, want one line mentioning %q", stderr, tc.want)
			}
			t.Logf("exit %d: %s", code, lines[0])
		})
	}
}
