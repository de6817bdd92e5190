package recipes

import (
	"testing"
	"time"
)

const (
	fairAcq    = "8f6ed299ffd259f0539c20f89253998c0777ea75"
	fairOnce   = "d20501c26a30adf6fb0fe9883bbbcc497e6157e2"
	fairUnl    = "367f80bd2e300e411fb0936d9b601e5bcb3fd4b6"
	fairForce  = "71ed11d4e4818119ac560b3d670a7f08256afc46"
	fairDequeu = "d1ddef65ad80886b5d36e023c99930044ddd653a"
	fq, ft     = "redisson_lock_queue:{f}", "redisson_lock_timeout:{f}"
)

// RFairLock's scripts, each in its own layout: fair.acquire's ARGV is
// lease, lockName, wait, now, and fair.tryonce's lease, lockName, now,
// wait.
func TestMatchFair(t *testing.T) {
	want := FairQueue{Queue: fq, Timeouts: ft, Wait: 5000, Now: 1733300000000}
	c, ok := Match(args("EVALSHA", fairAcq, "3", "f", fq, ft, "30000", "h:1", "5000", "1733300000000"))
	if !ok || c.Recipe.Kind != FairAcquire || c.Key != "f" || c.Holder != "h:1" || c.Lease != 30*time.Second || c.Fair != want {
		t.Fatalf("fair.acquire: %+v %v", c, ok)
	}
	c, ok = Match(args("EVALSHA", fairOnce, "3", "f", fq, ft, "30000", "h:1", "1733300000000", "5000"))
	want.Once = true
	if !ok || c.Recipe.Kind != FairAcquire || c.Fair != want {
		t.Fatalf("fair.tryonce: %+v %v", c, ok)
	}
	c, ok = Match(args("EVALSHA", fairUnl, "5", "f", fq, ft, "redisson_lock__channel:{f}", "redisson_unlock_latch:{f}:r",
		"0", "30000", "h:1", "1733300000000", "PUBLISH", "13500"))
	if !ok || c.Recipe.Kind != FairUnlock || c.Holder != "h:1" || c.Channel != "redisson_lock__channel:{f}" ||
		c.Latch != "redisson_unlock_latch:{f}:r" || c.Publish != "publish" || c.LatchTTL != 13500 ||
		c.Fair.Queue != fq || c.Fair.Timeouts != ft || c.Fair.Now != 1733300000000 {
		t.Fatalf("fair.unlock: %+v %v", c, ok)
	}
	c, ok = Match(args("EVALSHA", fairForce, "4", "f", fq, ft, "redisson_lock__channel:{f}", "0", "1733300000000", "SPUBLISH"))
	if !ok || c.Recipe.Kind != FairForceUnlock || c.Publish != "spublish" || c.Fair.Now != 1733300000000 || c.Fair.Queue != fq {
		t.Fatalf("fair.forceunlock: %+v %v", c, ok)
	}
	for name, keys := range map[string][2]string{
		"f":     {fq, ft},
		"a{b}c": {"redisson_lock_queue:a{b}c", "redisson_lock_timeout:a{b}c"},
	} {
		c, ok = Match(args("EVALSHA", fairDequeu, "2", keys[0], keys[1], "h:1", "5000"))
		if !ok || c.Recipe.Kind != FairDequeue || c.Key != name || c.Holder != "h:1" || c.Fair.Wait != 5000 {
			t.Fatalf("fair.dequeue of %s: %+v %v", name, c, ok)
		}
	}
}

func TestMatchFairRejects(t *testing.T) {
	for _, a := range [][]string{
		{"EVALSHA", fairAcq, "1", "f", "30000", "h:1"},                                // RLock's layout
		{"EVALSHA", fairAcq, "3", "f", fq, ft, "30000", "h:1", "-1", "1733300000000"}, // negative wait
		{"EVALSHA", fairAcq, "3", "f", fq, ft, "30000", "h:1", "5000", "0"},           // no clock
		{"EVALSHA", fairAcq, "3", "f", fq, "", "30000", "h:1", "5000", "1733300000000"},
		{"EVALSHA", fairOnce, "3", "f", fq, ft, "30000", "h:1", "5000"},
		{"EVALSHA", fairUnl, "5", "f", fq, ft, "c", "l", "0", "30000", "h:1", "x", "PUBLISH", "13500"},
		{"EVALSHA", fairForce, "4", "f", fq, ft, "c", "0", "1733300000000", "EXEC"},
		{"EVALSHA", fairDequeu, "2", "q", ft, "h:1", "5000"},                                            // not a fair queue's name
		{"EVALSHA", fairDequeu, "2", fq, "redisson_lock_timeout:{g}", "h:1", "5000"},                    // another lock's
		{"EVALSHA", fairDequeu, "2", "redisson_lock_queue:x", "redisson_lock_timeout:x", "h:1", "5000"}, // no braces
	} {
		if c, ok := Match(args(a...)); ok {
			t.Errorf("%q recognised as %s: %+v", a, c.Recipe.Name, c)
		}
	}
}
