package recipes

import (
	"slices"
	"testing"
	"time"
)

const (
	readAcquireSHA  = "95553a6ff11176c18e71344e89d116b06fd6f753"
	writeAcquireSHA = "6306ba3bf1f563b284bed52d305fce615c6664d9"
	readUnlockSHA   = "6e1b10e11ac0a3ed8e902562ecd32ce01b553039"
	writeUnlockSHA  = "21f5fb0f8ddfa9be5c3e0c9757c128796add75c6"
	readForceSHA    = "27dbe744e95c1d854a7f556cc6817030de2d0d01"
	readRenew352    = "1affef780a01e1406cb1968c62918f618d10d6a3"
	readRenew40     = "d6564f42b98d6eece0e940a478ee248f80b8a90a"
	readRenew47     = "38d2b478dfbe264ab67c221b7e4be62245f00ba0"
)

// Each RReadWriteLock script is recognised with its own layout, as
// Redisson 3.52.0, 4.0.0 and 4.7.0 send it.
func TestMatchReadWrite(t *testing.T) {
	c, ok := Match(args("EVALSHA", readAcquireSHA, "2", "rw", "{rw}:u:1:rwlock_timeout", "30000", "u:1", "u:1:write"))
	if !ok || c.Recipe.Kind != Acquire || c.RW == nil || c.RW.Write || c.Key != "rw" || c.Holder != "u:1" ||
		c.RW.WriteHolder != "u:1:write" || c.RW.TimeoutPrefix != "{rw}:u:1:rwlock_timeout" || c.Lease != 30*time.Second {
		t.Fatalf("read acquire: %+v %+v %v", c, c.RW, ok)
	}
	c, ok = Match(args("EVALSHA", writeAcquireSHA, "1", "rw", "30000", "u:1:write"))
	if !ok || c.Recipe.Kind != Acquire || c.RW == nil || !c.RW.Write || c.Holder != "u:1:write" {
		t.Fatalf("write acquire: %+v %v", c, ok)
	}
	c, ok = Match(args("EVALSHA", readUnlockSHA, "5", "rw", "redisson_rwlock:{rw}", "{rw}:u:1:rwlock_timeout", "{rw}",
		"redisson_unlock_latch:{rw}:q", "0", "u:1", "PUBLISH", "13500"))
	if !ok || c.Recipe.Kind != Unlock || c.RW == nil || c.RW.KeyPrefix != "{rw}" || c.RW.TimeoutPrefix != "{rw}:u:1:rwlock_timeout" ||
		c.Channel != "redisson_rwlock:{rw}" || c.Latch != "redisson_unlock_latch:{rw}:q" || c.Holder != "u:1" || c.LatchTTL != 13500 || c.Message != "0" {
		t.Fatalf("read unlock: %+v %+v %v", c, c.RW, ok)
	}
	c, ok = Match(args("EVALSHA", writeUnlockSHA, "3", "rw", "redisson_rwlock:{rw}", "redisson_unlock_latch:{rw}:q",
		"1", "30000", "u:1:write", "PUBLISH", "13500"))
	if !ok || c.Recipe.Kind != Unlock || c.RW == nil || !c.RW.Write || c.Lease != 30*time.Second || c.Holder != "u:1:write" {
		t.Fatalf("write unlock: %+v %v", c, ok)
	}
	c, ok = Match(args("EVALSHA", readForceSHA, "2", "rw", "redisson_rwlock:{rw}", "0", "PUBLISH"))
	if !ok || c.Recipe.Kind != ForceUnlock || c.RW == nil || c.RW.Write {
		t.Fatalf("read force-unlock: %+v %v", c, ok)
	}
	for _, tc := range []struct {
		sha   string
		style RenewStyle
	}{{readRenew352, Renew352}, {readRenew40, Renew40}} {
		c, ok = Match(args("EVALSHA", tc.sha, "4", "a", "{a}", "b", "{b}", "9000", "u:1", "u:2"))
		if !ok || c.Recipe.Kind != RenewBatch || c.RW == nil || c.RW.Style != tc.style || len(c.RW.Locks) != 2 ||
			c.RW.Locks[1].Key != "b" || c.RW.Locks[1].Prefix != "{b}" || !slices.Equal(c.RW.Locks[1].Holders, []string{"u:2"}) {
			t.Fatalf("read renewal %d: %+v %v", tc.style, c.RW, ok)
		}
		if got := len(c.RW.BatchKeys); (tc.style == Renew352) != (got == 4) {
			t.Fatalf("read renewal %d: batch keys %q", tc.style, c.RW.BatchKeys)
		}
	}
	c, ok = Match(args("EVALSHA", readRenew47, "4", "a", "{a}", "b", "{b}", "9000", "2", "u:1", "u:2", "1", "u:3"))
	if !ok || c.RW == nil || c.RW.Style != Renew47 || !slices.Equal(c.RW.Locks[0].Holders, []string{"u:1", "u:2"}) ||
		!slices.Equal(c.RW.Locks[1].Holders, []string{"u:3"}) {
		t.Fatalf("read renewal 4.7: %+v %v", c.RW, ok)
	}
	for _, a := range [][]string{
		{"EVALSHA", readAcquireSHA, "1", "rw", "30000", "u:1", "u:1:write"},                   // no timeout prefix
		{"EVALSHA", readAcquireSHA, "2", "rw", "{rw}:t", "30000", "u:1"},                      // no write field
		{"EVALSHA", writeAcquireSHA, "1", "rw", "0", "u:1:write"},                             // lease not positive
		{"EVALSHA", readUnlockSHA, "3", "rw", "c", "l", "0", "u:1", "PUBLISH", "13500"},       // RLock's layout
		{"EVALSHA", readRenew40, "3", "a", "{a}", "b", "9000", "u:1", "u:2"},                  // odd keys
		{"EVALSHA", readRenew40, "2", "a", "{a}", "9000", "u:1", "u:2"},                       // a holder too many
		{"EVALSHA", readRenew47, "4", "a", "{a}", "b", "{b}", "9000", "2", "u:1", "u:2", "1"}, // count beyond ARGV
		{"EVALSHA", readRenew47, "2", "a", "{a}", "9000", "1", "u:1", "u:2"},                  // left over
		{"EVALSHA", readRenew47, "2", "a", "{a}", "9000", "x", "u:1"},                         // count not a number
	} {
		if c, ok := Match(args(a...)); ok {
			t.Errorf("%q recognised as %s: %+v", a, c.Recipe.Name, c)
		}
	}
}
