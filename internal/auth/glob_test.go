package auth

import "testing"

// globCases were each checked against redis-server 7.0.15 (ACL DRYRUN of GET
// for a user whose only key pattern is the pattern); TestMatchAgainstRedis
// checks them, and random ones, again whenever redis-server is installed.
var globCases = []struct {
	pattern, s string
	want       bool
}{
	{"", "", true},
	{"*", "anything/with/slashes", true},
	{"**", "", false}, // Redis's loop never starts on an empty string
	{"*a", "", false},
	{"[", "", false},
	{"a[", "a", false},
	{"a[", "ab", false},
	{"a[b", "ab", true},
	{`a\`, `a\`, true},
	{`a\`, "a", false},
	{"[a-", "-", true},
	{"[a-", "a", true},
	{"[^]", "x", true},
	{"[]]", "]", false},
	{"[]]", "", false},
	{"a*b/c", "axx/b/c", true},
	{`[\]]`, "]", true},
	{"tenant-a:*", "tenant-a:", true},
	{"tenant-a:*", "tenant-b:1", false},
	{"tenant-a:*", "tenant-a", false},
	{"h?llo", "hello", true},
	{"h?llo", "hllo", false},
	{"h[ae]llo", "hallo", true},
	{"h[^e]llo", "hello", false},
	{"h[^e]llo", "hallo", true},
	{"h[a-b]llo", "hbllo", true},
	{"h[b-a]llo", "hbllo", true},
	{"h[a-b]llo", "hcllo", false},
	{`h\*llo`, "h*llo", true},
	{`h\*llo`, "hello", false},
	{"*?", "a", true},
	{"a*", "a", true},
	{"a**", "a", true},
	{"a*b*c", "abbbbc", true},
	{"a*b*c", "abbbbcd", false},
	{"?", "", false},
	{"x\x00y", "x\x00y", true},
	{"\xff*", "\xff\xfe", true},
	{"[\xfe-\xff]", "\xff", true},
	// Redis compares signed chars: [a-\xff] is \xff..a, so not b.
	{"[a-\xff]", "b", false},
	{"[a-\xff]", "\x80", false},
	{"[a-\xff]", "a", true},
	{"[\x7f-\x80]", "a", true},
}

func TestMatch(t *testing.T) {
	for _, c := range globCases {
		if got := MatchString(c.pattern, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

func TestMatchAllocations(t *testing.T) {
	p, s := []byte("a*b*[c-d]?\\*"), []byte("aXbYYcZ*")
	if n := testing.AllocsPerRun(100, func() { Match(p, s) }); n != 0 {
		t.Fatalf("Match allocates %v times, want 0", n)
	}
}
