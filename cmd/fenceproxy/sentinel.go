package main

import (
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// sentinelFlags name the backend through Redis Sentinel instead of
// --backend. Sentinel's password, like the backend's, comes from the
// environment only: a flag shows in ps.
type sentinelFlags struct {
	addrs      string
	masterName string
	user       string
	password   string // $FENCEPROXY_SENTINEL_PASSWORD
}

func (f *sentinelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addrs, "sentinel", f.addrs, "Redis Sentinels `host:port[,host:port...]`: the backend is the master they name (with --master-name), followed through failovers; replaces --backend")
	fs.StringVar(&f.masterName, "master-name", f.masterName, "the `name` the --sentinel Sentinels monitor the master under")
	fs.StringVar(&f.user, "sentinel-user", f.user, "ACL user for the Sentinels (with the password from $FENCEPROXY_SENTINEL_PASSWORD); the master is reached with --backend-user")
}

// check validates the combination, after fs has parsed.
func (f *sentinelFlags) check(fs *flag.FlagSet) error {
	f.password = os.Getenv("FENCEPROXY_SENTINEL_PASSWORD")
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch {
	case f.addrs == "" && (f.masterName != "" || f.user != "" || set["sentinel-tls"]):
		return errors.New("--master-name, --sentinel-user and --sentinel-tls need --sentinel, the Sentinels to ask")
	case f.addrs == "":
		return nil
	case f.masterName == "":
		return errors.New("--sentinel needs --master-name, the name the Sentinels monitor the master under")
	case set["backend"]:
		return errors.New("--backend and --sentinel both name the backend: give one (with --sentinel, the master is the one the Sentinels name)")
	}
	for _, a := range strings.Split(f.addrs, ",") {
		if a == "" {
			return errors.New("--sentinel has an empty address: give host:port[,host:port...]")
		}
	}
	return nil
}

// options are the upstream package's, nil without --sentinel.
func (f *sentinelFlags) options(t *tlsFlags) (*upstream.SentinelOptions, error) {
	if f.addrs == "" {
		return nil, nil
	}
	cfg, err := t.sentinelConfig()
	if err != nil {
		return nil, err
	}
	return &upstream.SentinelOptions{
		Addrs: strings.Split(f.addrs, ","), MasterName: f.masterName,
		Username: f.user, Password: f.password, TLS: cfg,
	}, nil
}

// String is how errors name the backend: the flags that chose it.
func (f *sentinelFlags) String() string {
	return "--sentinel " + f.addrs + " --master-name " + f.masterName
}
