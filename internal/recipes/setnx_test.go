package recipes

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMatchSet(t *testing.T) {
	p, err := ParseKeyPatterns("lock:*,{app}:l?ck")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req   []string
		lease time.Duration
	}{
		{[]string{"SET", "lock:a", "v", "NX", "PX", "30000"}, 30 * time.Second},
		{[]string{"set", "lock:a", "v", "ex", "8", "nx"}, 8 * time.Second}, // go-redis SetNX
		{[]string{"SET", "{app}:lock", "v", "Px", "5", "nX"}, 5 * time.Millisecond},
		{[]string{"SET", "lock:a/b", "v", "NX"}, 0}, // redis-py timeout=None; '*' matches '/'
	} {
		c, ok := MatchSet(p, args(tc.req...))
		if !ok || c.Key != tc.req[1] || c.Holder != "v" || c.Lease != tc.lease || c.Kind != ValueAcquire || !c.SET {
			t.Errorf("MatchSet(%q) = %+v, %v; want a grant of %s with lease %v", tc.req, c, ok, tc.req[1], tc.lease)
		}
	}
	for _, req := range [][]string{
		{"SET", "cache:a", "v", "NX", "PX", "100"}, // outside --lock-keys
		{"SET", "lock:a", "v"},
		{"SET", "lock:a", "v", "PX", "100"},
		{"SET", "lock:a", "v", "XX", "PX", "100"},
		{"SET", "lock:a", "v", "NX", "GET"},
		{"SET", "lock:a", "v", "NX", "KEEPTTL"},
		{"SET", "lock:a", "v", "NX", "PXAT", "99999999999999"},
		{"SET", "lock:a", "v", "NX", "EXAT", "9999999999"},
		{"SET", "lock:a", "v", "NX", "NX", "PX", "100"},
		{"SET", "lock:a", "v", "NX", "PX", "100", "EX", "1"},
		{"SET", "lock:a", "v", "NX", "PX", "0"},
		{"SET", "lock:a", "v", "NX", "PX", "-1"},
		{"SET", "lock:a", "v", "NX", "PX"},
		{"SET", "lock:a", "v", "NX", "EX", "99999999999"},
		{"SET", "lock:a", "", "NX"},
	} {
		if c, ok := MatchSet(p, args(req...)); ok {
			t.Errorf("MatchSet(%q) = %+v, want it forwarded", req, c)
		}
	}
	if _, ok := MatchSet(nil, args("SET", "lock:a", "v", "NX")); ok {
		t.Error("MatchSet with no --lock-keys recognised a grant")
	}
	if _, err := ParseKeyPatterns("lock:*,"); err == nil {
		t.Error("ParseKeyPatterns accepted an empty pattern")
	}
}

func TestMatchValue(t *testing.T) {
	for _, tc := range []struct {
		req  []string
		want ValueCall
	}{
		{[]string{"EVALSHA", "c3f8721cbb97f72bc19e972846bd7aaf91901658", "1", "k", "tok"},
			ValueCall{Kind: ValueRelease, Shape: ShapeOne, Key: "k", Holder: "tok"}},
		{[]string{"EVALSHA", "A4E8783852E6B949F9EF3A97212805108459A890", "1", "k", "tok", "1000", "0"},
			ValueCall{Kind: ValueExtend, Shape: ShapeOne, Key: "k", Holder: "tok", Lease: time.Second, AddToTTL: true}},
		{[]string{"evalsha", "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79", "1", "k", "v", "8000"},
			ValueCall{Kind: ValueExtend, Shape: ShapeOne, Key: "k", Holder: "v", Lease: 8 * time.Second, GrantFree: true}},
		{[]string{"EVALSHA", "80a1b5f2cfccec3b7119ba7721d2127682b691a7", "1", "k", "tokmeta", "3", "100"},
			ValueCall{Kind: ValueAcquire, Shape: ShapeOK, Key: "k", Holder: "tokmeta", Lease: 100 * time.Millisecond, Prefix: 3}},
		{[]string{"EVALSHA", "96da70f7716f27d278a5218544df37fd8b0a5e4c", "1", "k", "v", "100"},
			ValueCall{Kind: ValueAcquire, Shape: ShapeCount, Key: "k", Holder: "v", Lease: 100 * time.Millisecond}},
		{[]string{"EVALSHA", "e950836ed1e694540c503ef9972b8de518044d3b", "1", "k", "v"},
			ValueCall{Kind: ValueRelease, Shape: ShapeDelete, Key: "k", Holder: "v"}},
		{[]string{"EVALSHA", "96da70f7716f27d278a5218544df37fd8b0a5e4c", "2", "k1", "k2", "v", "100"},
			ValueCall{Kind: ValueAcquire, Shape: ShapeCount, Key: "k1", Keys: []string{"k1", "k2"}, Holder: "v", Lease: 100 * time.Millisecond}},
		{[]string{"EVALSHA", "e4612211c9f8f51c257e26e056b0a654b3187242", "3", "k1", "k2", "k3", "v"},
			ValueCall{Kind: ValueRelease, Shape: ShapeCount, Key: "k1", Keys: []string{"k1", "k2", "k3"}, Holder: "v"}},
	} {
		c, ok := MatchValue(args(tc.req...))
		c.Name = ""
		if !ok || !reflect.DeepEqual(c, tc.want) {
			t.Errorf("MatchValue(%q) = %+v, %v; want %+v", tc.req, c, ok, tc.want)
		}
	}
	for _, req := range [][]string{
		{"EVALSHA", "96da70f7716f27d278a5218544df37fd8b0a5e4c", "2", "k1", "k1", "v", "100"}, // redlock, a key twice
		{"EVALSHA", "a4e8783852e6b949f9ef3a97212805108459a890", "1", "k", "tok", "-5", "0"},  // a lease not above 0
		{"EVALSHA", "a4e8783852e6b949f9ef3a97212805108459a890", "1", "k", "tok", "5", "2"},
		{"EVALSHA", "80a1b5f2cfccec3b7119ba7721d2127682b691a7", "1", "k", "tok", "9", "100"}, // prefix longer than the value
		{"EVALSHA", "6484da7d58920897fdc22b7f9afd1a3d47524ea8", "1", "k", "tok"},             // redislock pttl: a read
		{"EVALSHA", "c3f8721cbb97f72bc19e972846bd7aaf91901658", "2", "k", "tok"},
		{"EVALSHA", "149c5a8bf18676fd99e9e6e24923bd64d9b62f94", "1", "k", "30000", "h:1"}, // Redisson's: Match's
	} {
		if c, ok := MatchValue(args(req...)); ok {
			t.Errorf("MatchValue(%q) = %+v, want no value call", req, c)
		}
	}
}

// The value catalogue against the libraries' bodies: RECIPES_BODIES names
// the study's redisson directory, whose parent holds them (not in this
// repository).
func TestValueBodies(t *testing.T) {
	dir := os.Getenv("RECIPES_BODIES")
	if dir == "" {
		t.Skip("set RECIPES_BODIES to check the catalogue against the bodies")
	}
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), "*.lua"))
	known := map[string]bool{}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(body)
		sha := hex.EncodeToString(sum[:])
		r := Lookup(args("EVAL", string(body), "0"))
		if strings.Contains(f, "luaPTTL") {
			if r != nil {
				t.Errorf("%s (a read) is recognised", f)
			}
			continue
		}
		if r == nil || r.SHA != sha || valueBySHA[sha] == nil {
			t.Errorf("EVAL of %s (%s, %d bytes) not recognised", filepath.Base(f), sha, len(body))
		}
		known[sha] = true
	}
	for _, r := range ValueCatalogue() {
		if !known[r.SHA] {
			t.Errorf("%s: no body in %s", r.Name, filepath.Dir(dir))
		}
	}
}

// Match leaves a value lock's script to MatchValue: it shares Lookup's
// table but has no Redisson layout (a tier follower's relay asked Match of
// redis-py's release, and panicked on it).
func TestMatchLeavesValueScripts(t *testing.T) {
	for _, r := range ValueCatalogue() {
		if c, ok := Match([][]byte{[]byte("EVALSHA"), []byte(r.SHA), []byte("1"), []byte("lock:x"), []byte("v"), []byte("1000"), []byte("0")}); ok {
			t.Errorf("Match of %s = %+v, want not a Redisson call", r.Name, c)
		}
	}
}
