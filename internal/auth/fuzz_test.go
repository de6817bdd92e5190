package auth

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// slowMatch is stringmatchlen without the skip-longer-matches shortcut and
// the nesting limit: plain backtracking, exponential in the worst case, so
// only for short inputs. FuzzMatch holds Match to it.
func slowMatch(p, s []byte) bool {
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for ; len(s) > 0; s = s[1:] {
				if slowMatch(p[1:], s) {
					return true
				}
			}
			return false
		case '?':
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			m := false
			for {
				if len(p) >= 2 && p[0] == '\\' {
					m = m || p[1] == s[0]
					p = p[2:]
					continue
				}
				if len(p) == 0 {
					break
				}
				if p[0] == ']' {
					p = p[1:]
					break
				}
				if len(p) >= 3 && p[1] == '-' {
					lo, hi := int8(p[0]), int8(p[2])
					if lo > hi {
						lo, hi = hi, lo
					}
					m = m || (int8(s[0]) >= lo && int8(s[0]) <= hi)
					p = p[3:]
					continue
				}
				m = m || p[0] == s[0]
				p = p[1:]
			}
			if m == not {
				return false
			}
			s = s[1:]
			if len(s) == 0 {
				p = bytes.TrimLeft(p, "*")
			}
			continue
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			if p[0] != s[0] {
				return false
			}
		default:
			if p[0] != s[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
		if len(s) == 0 {
			p = bytes.TrimLeft(p, "*")
		}
	}
	return len(p) == 0 && len(s) == 0
}

func FuzzMatch(f *testing.F) {
	for _, c := range globCases {
		f.Add(c.pattern, c.s)
	}
	f.Add("a*b*c*d*e*f*", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 24 || len(s) > 24 || strings.Count(pattern, "*") > 6 {
			return // the oracle backtracks exponentially
		}
		got := MatchString(pattern, s)
		if want := slowMatch([]byte(pattern), []byte(s)); got != want {
			t.Fatalf("Match(%q, %q) = %v, plain backtracking says %v", pattern, s, got, want)
		}
	})
}

func TestSlowMatchAgreesOnTable(t *testing.T) {
	for _, c := range globCases {
		if got := slowMatch([]byte(c.pattern), []byte(c.s)); got != c.want {
			t.Errorf("slowMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// FuzzParse feeds the ACL file parser and compiler anything: they must
// return users or an error naming the file, never panic, and never echo a
// password rule's text in an error.
func FuzzParse(f *testing.F) {
	f.Add("user alice on >secret ~tenant-a:* +@all -flushall\n")
	f.Add("# comment\n\nuser default on nopass ~* &* +@all\nuser bob off #" + strings.Repeat("ab", 32) + " %R~ro:* %W~wo:* -@all +get +config|get\n")
	f.Add("user x on >p <p resetpass nopass reset allkeys resetkeys allchannels resetchannels &ch:* allcommands nocommands +@lock -@dangerous clearselectors\n")
	f.Add("user a (~x +get)\n")
	f.Add("usr a\n")
	f.Add("user a on >\n")
	f.Fuzz(func(t *testing.T, text string) {
		specs, err := Parse(strings.NewReader(text), "fuzz.acl")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "auth: bad ACL rule: fuzz.acl") {
				t.Fatalf("error does not name the file: %v", err)
			}
			// An error names the user it is about, so first take every
			// user's name out of it (as is and as %q prints it): a rule
			// spelled like (a part of) a name is echoed as the name (found
			// by this target: "user <000000\xf4\n<000000").
			// Likewise a rule that is no password rule, echoed as the
			// rule in error, may contain one's text (found by this target:
			// "user 1 0<000000 <000000" names the unknown rule "0<000000").
			// (Rules first: a name's text may be a part of one.)
			msg := err.Error()
			for _, line := range strings.Split(text, "\n") {
				for i, w := range strings.Fields(line) {
					if i >= 2 && w[0] != '>' && w[0] != '<' {
						msg = strings.ReplaceAll(msg, strconv.Quote(w), "")
					}
				}
			}
			for _, line := range strings.Split(text, "\n") {
				if words := strings.Fields(line); len(words) > 1 && words[0] == "user" {
					msg = strings.ReplaceAll(msg, strconv.Quote(words[1]), "")
					msg = strings.ReplaceAll(msg, words[1], "")
				}
			}
			for _, line := range strings.Split(text, "\n") {
				words := strings.Fields(line)
				for i, w := range words {
					// A rule (not a user's name) that carries a password;
					// a line's first word counts too, in case a line
					// starts with one.
					if (i >= 2 || i == 0) && len(w) > 6 && (w[0] == '>' || w[0] == '<') && strings.Contains(msg, w) {
						t.Fatalf("error echoes a password rule %q: %v", w, err)
					}
				}
			}
			return
		}
		a, err := Compile(specs, "", testCommands)
		if err != nil {
			return
		}
		if a.Default() == nil {
			t.Fatal("no default user")
		}
		for _, name := range a.Users() {
			u := a.User(name)
			u.CanRun("get")
			u.CanKey([]byte("k"), true, true)
		}
	})
}
