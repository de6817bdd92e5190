package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelOptions say how to find the master through Redis Sentinel.
type SentinelOptions struct {
	Addrs      []string // the Sentinels, host:port
	MasterName string   // the name they monitor the master under
	// Username and Password are Sentinel's own (its requirepass or ACL
	// user), not the master's.
	Username string
	Password string
	TLS      *tls.Config // nil: plaintext to the Sentinels
}

// sentinels asks a set of Redis Sentinels which master they name, and
// listens for their +switch-master announcements.
//
// Which answer counts: every Sentinel that answers is asked, and the one
// with the newest configuration (the highest config-epoch, which only a
// failover agreed by a majority raises) decides. A Sentinel that has not yet
// heard of a failover thus cannot send the proxy back to the old master.
// go-redis's failover client takes the first Sentinel that answers; it also
// has no way to ask whether the master it names is seen down, which
// confirm needs.
type sentinels struct {
	opts    SentinelOptions
	clients []*redis.SentinelClient

	mu   sync.Mutex
	subs []*redis.PubSub
}

func newSentinels(opts SentinelOptions) *sentinels {
	s := &sentinels{opts: opts}
	for _, addr := range opts.Addrs {
		s.clients = append(s.clients, redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: opts.Username, Password: opts.Password, TLSConfig: opts.TLS,
			Protocol: 2, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			MaxRetries: -1, PoolSize: 2, DisableIdentity: true, ContextTimeoutEnabled: true,
		}))
	}
	return s
}

// sentinelView is one Sentinel's answer to SENTINEL MASTER.
type sentinelView struct {
	addr   string
	epoch  int64
	usable bool // not seen down, no failover under way
}

// master returns the master that the Sentinel with the newest configuration
// names, and whether that Sentinel sees it usable (not subjectively or
// objectively down, no failover in progress). It fails only if no Sentinel
// answers.
func (s *sentinels) master(ctx context.Context) (addr string, usable bool, err error) {
	views := make([]sentinelView, len(s.clients))
	errs := make([]error, len(s.clients))
	var wg sync.WaitGroup
	for i, c := range s.clients {
		wg.Go(func() {
			m, err := c.Master(ctx, s.opts.MasterName).Result()
			if err == nil && (m["ip"] == "" || m["port"] == "") {
				err = errors.New("the reply names no address")
			}
			if err != nil {
				errs[i] = fmt.Errorf("asking Sentinel %s: %w", s.opts.Addrs[i], err)
				return
			}
			v := sentinelView{addr: net.JoinHostPort(m["ip"], m["port"]), usable: true}
			v.epoch, _ = strconv.ParseInt(m["config-epoch"], 10, 64)
			for _, f := range strings.Split(m["flags"], ",") {
				if f == "s_down" || f == "o_down" || f == "failover_in_progress" {
					v.usable = false
				}
			}
			views[i] = v
		})
	}
	wg.Wait()
	best := -1
	for i, v := range views {
		if errs[i] == nil && (best < 0 || v.epoch > views[best].epoch) {
			best = i
		}
	}
	if best < 0 {
		// One line: it may be the reason fenceproxy does not start.
		msgs := make([]string, len(errs))
		for i, err := range errs {
			msgs[i] = err.Error()
		}
		return "", false, fmt.Errorf("no Sentinel named a master %q: %s", s.opts.MasterName, strings.Join(msgs, "; "))
	}
	return views[best].addr, views[best].usable, nil
}

// confirm fails, with an error wrapping ErrNotMaster, unless the Sentinels
// name addr as the master and see it usable; with any other error if no
// Sentinel answers.
func (s *sentinels) confirm(ctx context.Context, addr string) error {
	named, usable, err := s.master(ctx)
	switch {
	case err != nil:
		return err
	case named != addr:
		return fmt.Errorf("%w: Sentinel names %s as the master of %q, not %s", ErrNotMaster, named, s.opts.MasterName, addr)
	case !usable:
		return fmt.Errorf("%w: Sentinel sees %s down or failing over", ErrNotMaster, addr)
	}
	return nil
}

// watch subscribes to +switch-master on every Sentinel and calls changed
// for each announcement about this master. go-redis resubscribes after a
// lost connection; announcements missed meanwhile are caught by the
// periodic check (standalone.watch), not by this.
func (s *sentinels) watch(changed func(), log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.clients {
		sub := c.Subscribe(context.Background(), "+switch-master")
		s.subs = append(s.subs, sub)
		go func() {
			for msg := range sub.Channel() {
				// "<name> <old-ip> <old-port> <new-ip> <new-port>"
				if name, _, _ := strings.Cut(msg.Payload, " "); name == s.opts.MasterName {
					log.Info("Sentinel announces a new master", "sentinel", s.opts.Addrs[i], "switch", msg.Payload)
					changed()
				}
			}
		}()
	}
}

func (s *sentinels) close() {
	s.mu.Lock()
	for _, sub := range s.subs {
		sub.Close()
	}
	s.subs = nil
	s.mu.Unlock()
	for _, c := range s.clients {
		c.Close()
	}
}
