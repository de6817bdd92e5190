package metrics

import "github.com/prometheus/client_golang/prometheus"

// Auth counts client authentication outcomes; it exists only when
// fenceproxy's own authentication is on (--aclfile, --requirepass). Like
// every metric here it carries no user name, key or password.
type Auth struct {
	Failures prometheus.Counter     // AUTH or HELLO AUTH answered WRONGPASS
	Denials  *prometheus.CounterVec // reason: noauth, command, key, channel
}

// NewAuth creates the authentication metrics in m's registry. Call it once.
func (m *Metrics) NewAuth() *Auth {
	a := &Auth{
		Failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_auth_failures_total", Help: "AUTH and HELLO AUTH attempts refused with WRONGPASS.",
		}),
		Denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_acl_denials_total", Help: "Requests refused by the connection's ACL user, by reason (noauth, command, key, channel).",
		}, []string{"reason"}),
	}
	m.Registry.MustRegister(a.Failures, a.Denials)
	return a
}
