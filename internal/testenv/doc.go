// Package testenv starts real redis-server and fenceproxy processes on loopback ports for tests.
//
// The house rules it enforces:
//
//  1. Real servers, never mocks. Every Redis is a redis-server process bound to
//     127.0.0.1 on a port from FreePort, with its own temp dir and no
//     persistence (--save "" --appendonly no). Every Sentinel is a
//     redis-sentinel process (StartSentinels) with a config file of its own
//     in a temp dir. Every proxy is the fenceproxy binary built from
//     ./cmd/fenceproxy (BuildProxy).
//     A network fault is a Link (StartLink): a relay on loopback, made with
//     Shopify's toxiproxy as a library, that can hold or drop the bytes of
//     one direction or both, delay them, and heal; Redis.AnnounceVia and
//     SentinelOptions.MasterPort put Links between Sentinel (and whoever it
//     names the master to) and Redis.
//  2. Nothing is left running. Each process is started in its own process
//     group (Setpgid) with a parent-death signal (SIGKILL), is always waited
//     for, and is killed by pid in t.Cleanup. The parent-death signal is tied to
//     the OS thread that forked the child, so the goroutine that starts a child
//     locks its thread and stays on it until the child exits.
//  3. Every wait is bounded: 10s for redis-server to answer PING or for a
//     replica link, 15s for fenceproxy to answer PING, 30s for Sentinels to
//     know each other or to name a new master, 10s for a process to exit
//     after a signal, 5s per operation on a Conn (SetTimeout changes it).
//
// Helpers that take a testing.TB call t.Fatalf on failure, so call them from
// the test's own goroutine. Conn.TryDo and Conn.ReadReply return errors
// instead and may be used from other goroutines.
//
// Environment:
//
//	FENCEPROXY_BIN   use this fenceproxy binary instead of building ./cmd/fenceproxy
//
// When the test binary is built with -race, BuildProxy builds fenceproxy with
// -race too, and a proxy whose log shows "WARNING: DATA RACE" fails the test
// that started it.
package testenv
