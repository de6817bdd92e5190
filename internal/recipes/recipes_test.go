package recipes

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func args(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, a := range s {
		out[i] = []byte(a)
	}
	return out
}

const (
	acquireSHA = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94"
	renewSHA   = "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635"
	unlockSHA  = "6866459238a13a701d42f4971f12d9f3a50e2442"
	fencedTok  = "49babb5a1e6a0c5f188c2ae62b93b51cdfd63e45"
	fencedAcq  = "46b5551ba403d6152a7a6eca122e08728d6c8c66"
)

func TestMatch(t *testing.T) {
	c, ok := Match(args("EVALSHA", acquireSHA, "1", "orders", "30000", "uuid:1"))
	if !ok || c.Recipe.Kind != Acquire || c.Key != "orders" || c.Holder != "uuid:1" || c.Lease != 30*time.Second {
		t.Fatalf("acquire: %+v %v", c, ok)
	}
	// Redis takes a SHA in either case, and so does recognition.
	if _, ok := Match(args("evalsha", strings.ToUpper(acquireSHA), "1", "orders", "30000", "uuid:1")); !ok {
		t.Fatal("an upper-case SHA is not recognised")
	}
	c, ok = Match(args("EVALSHA", renewSHA, "2", "a", "b", "9000", "h:1", "h:2"))
	if !ok || c.Recipe.Kind != RenewBatch || len(c.Locks) != 2 || c.Locks[1] != (Lock{"b", "h:2"}) || c.Lease != 9*time.Second {
		t.Fatalf("renewal: %+v %v", c, ok)
	}
	c, ok = Match(args("EVALSHA", unlockSHA, "3", "n", "redisson_lock__channel:{n}", "redisson_unlock_latch:{n}:r",
		"0", "30000", "h:1", "PUBLISH", "13500"))
	if !ok || c.Recipe.Kind != Unlock || c.Channel != "redisson_lock__channel:{n}" || c.Latch != "redisson_unlock_latch:{n}:r" ||
		c.Publish != "publish" || c.Message != "0" || c.LatchTTL != 13500 || c.Holder != "h:1" {
		t.Fatalf("unlock: %+v %v", c, ok)
	}
	for _, sha := range []string{fencedTok, fencedAcq} {
		c, ok = Match(args("EVALSHA", sha, "2", "f", "redisson_lock_token:{f}", "30000", "h:1"))
		if !ok || c.Recipe.Kind != Acquire || !c.Recipe.Fenced || c.Recipe.TokenReply != (sha == fencedTok) ||
			c.Key != "f" || c.TokenKey != "redisson_lock_token:{f}" || c.Holder != "h:1" || c.Lease != 30*time.Second {
			t.Fatalf("fenced acquire %s: %+v %v", sha, c, ok)
		}
	}
}

// Requests that must be forwarded as they came: not a known script, or
// a known one whose arguments do not have its layout.
func TestMatchRejects(t *testing.T) {
	for _, a := range [][]string{
		{"EVALSHA", "0000000000000000000000000000000000000000", "1", "k", "30000", "h"},
		{"EVALSHA", acquireSHA[:39], "1", "k", "30000", "h"},
		{"EVAL", "return 1", "0"},
		{"EVALSHA_RO", acquireSHA, "1", "k", "30000", "h"},
		{"EVALSHA", acquireSHA, "2", "k", "k2", "30000", "h"}, // two keys
		{"EVALSHA", acquireSHA, "1", "k", "30000"},            // no holder
		{"EVALSHA", acquireSHA, "1", "k", "-1", "h"},          // lease not positive
		{"EVALSHA", acquireSHA, "1", "k", "1.5", "h"},
		{"EVALSHA", acquireSHA, "1", "k", "30000", ""},
		{"EVALSHA", acquireSHA, "1", "", "30000", "h"},
		{"EVALSHA", acquireSHA, "x", "k", "30000", "h"},
		{"EVALSHA", acquireSHA, "9", "k", "30000", "h"}, // more keys than arguments
		{"EVALSHA", renewSHA, "2", "a", "b", "9000", "h:1"},
		{"EVALSHA", renewSHA, "0", "9000"},
		{"EVALSHA", fencedTok, "1", "f", "30000", "h"},                                 // no token key
		{"EVALSHA", fencedAcq, "2", "f", "", "30000", "h"},                             // empty token key
		{"EVALSHA", fencedAcq, "3", "f", "t", "x", "30000", "h"},                       // three keys
		{"EVALSHA", unlockSHA, "3", "n", "c", "l", "0", "30000", "h", "EXEC", "13500"}, // not a publish
		{"EVALSHA", unlockSHA, "3", "n", "c", "l", "0", "30000", "h", "PUBLISH", "0"},
	} {
		if c, ok := Match(args(a...)); ok {
			t.Errorf("%q recognised as %s: %+v", a, c.Recipe.Name, c)
		}
	}
}

// EVAL of a known body is recognised by its SHA-1. The bodies are not in
// this repository: RECIPES_BODIES names a directory with them
// (lock.acquire.lua ...; scripts/recipe-bodies.sh fetches them from the
// packages, scripts/test.sh sets it); without it only
// the catalogue's own consistency is checked.
func TestEvalBodies(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Catalogue() {
		if len(r.SHA) != 40 || strings.ToLower(r.SHA) != r.SHA || seen[r.SHA] {
			t.Errorf("%s: SHA %q is not a distinct lower-case SHA-1", r.Name, r.SHA)
		}
		seen[r.SHA] = true
	}
	dir := os.Getenv("RECIPES_BODIES")
	if dir == "" {
		t.Skip("set RECIPES_BODIES to check the catalogue against the bodies")
	}
	for _, r := range Catalogue() {
		file := strings.TrimPrefix(r.Name, "redisson ") + ".lua"
		body, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(body)
		if hex.EncodeToString(sum[:]) != r.SHA || len(body) != r.BodyLen {
			t.Errorf("%s: body's SHA-1 %x, %d bytes; catalogue %s, %d", r.Name, sum, len(body), r.SHA, r.BodyLen)
		}
		if got := Lookup(args("EVAL", string(body), "0")); got == nil || got.SHA != r.SHA {
			t.Errorf("EVAL of %s's body not recognised", r.Name)
		}
	}
}

// TestMatchNoRecipe: a request Lookup found no recipe for matches nothing,
// as a lock recipe nor as a value lock.
func TestMatchNoRecipe(t *testing.T) {
	args := [][]byte{[]byte("EVAL"), []byte("return 1"), []byte("1"), []byte("k")}
	var r *Recipe
	if Lookup(args) != nil {
		t.Fatal("Lookup found a recipe for return 1")
	}
	if _, ok := r.Match(args); ok {
		t.Error("Match: ok for no recipe")
	}
	if _, ok := r.MatchValue(args); ok {
		t.Error("MatchValue: ok for no recipe")
	}
}
