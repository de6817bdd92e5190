package auth

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrSyntax is wrapped by every error Parse and ParseFile return.
var ErrSyntax = errors.New("auth: bad ACL rule")

// ruleKind is what one rule does; its argument, if any, is in rule.arg.
type ruleKind uint8

const (
	ruleOn ruleKind = iota
	ruleOff
	ruleNopass
	ruleResetpass
	ruleAddPass    // >password or #sha256: arg is the 32-byte digest
	ruleRemovePass // <password or !sha256: arg is the 32-byte digest
	ruleKey        // ~pattern, %R~, %W~, %RW~: arg pattern, read/write
	ruleAllkeys
	ruleResetkeys
	ruleChannel // &pattern
	ruleAllchannels
	ruleResetchannels
	ruleAllowCommand   // +cmd or +cmd|sub: arg the lower-case name
	ruleDenyCommand    // -cmd
	ruleAllowCategory  // +@cat: arg the lower-case category
	ruleDenyCategory   // -@cat
	ruleReset          // reset: as a new user
	ruleClearSelectors // clearselectors: no selectors here, nothing to do
)

// rule is one parsed rule, with where it was written for Compile's errors.
type rule struct {
	kind        ruleKind
	arg         string
	read, write bool // ruleKey
	word        int  // 1-based position on its line, counting "user" and the name
}

// UserSpec is one "user" line of an ACL file, parsed but not yet resolved
// against the backend's commands.
type UserSpec struct {
	Name  string
	File  string // where it was written, for errors
	Line  int
	rules []rule
}

// maxLine bounds one line of an ACL file (Redis has no limit; a megabyte
// of rules is a mistake, not a user).
const maxLine = 1 << 20

// ParseFile reads an ACL file (see Parse).
func ParseFile(path string) ([]UserSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	defer f.Close()
	return Parse(f, path)
}

// Parse reads ACL lines: "user <name> <rule> ..." per line, words separated
// by spaces or tabs, blank lines and lines starting with '#' skipped. It
// checks every rule's syntax and reports the first error as
// "FILE:LINE: ..." naming the rule (a rule that carries a password is named
// by its kind only, never echoed). A user may appear on one line only, as in
// Redis's aclfile. Passwords leave Parse as SHA-256 digests.
func Parse(r io.Reader, file string) ([]UserSpec, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var specs []UserSpec
	seen := map[string]int{}
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		words := strings.Fields(line)
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s:%d: %s", ErrSyntax, file, n, fmt.Sprintf(format, args...))
		}
		if words[0] != "user" {
			return nil, fail("a line must start with \"user <name>\" (or # for a comment)")
		}
		if len(words) < 2 {
			return nil, fail("\"user\" without a name")
		}
		name := words[1]
		if msg := checkName(name); msg != "" {
			return nil, fail("%s", msg)
		}
		if prev, ok := seen[name]; ok {
			return nil, fail("user %q is already defined on line %d", name, prev)
		}
		seen[name] = n
		spec := UserSpec{Name: name, File: file, Line: n}
		for i, w := range words[2:] {
			ru, msg := parseRule(w)
			if msg != "" {
				return nil, fail("user %q, rule %d: %s", name, i+1, msg)
			}
			ru.word = i + 3
			spec.rules = append(spec.rules, ru)
		}
		specs = append(specs, spec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSyntax, file, err)
	}
	return specs, nil
}

// checkName refuses names that could not be typed in AUTH or that would
// make the lock owners' user prefix ambiguous (a NUL byte ends the user's
// part of an owner record).
func checkName(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < '!' || c > '~' {
			return fmt.Sprintf("user name %q may contain only printable ASCII without spaces", clip(name))
		}
	}
	return ""
}

// parseRule reads one rule; msg says what is wrong with it.
func parseRule(w string) (r rule, msg string) {
	lw := strings.ToLower(w)
	switch lw {
	case "on":
		return rule{kind: ruleOn}, ""
	case "off":
		return rule{kind: ruleOff}, ""
	case "nopass":
		return rule{kind: ruleNopass}, ""
	case "resetpass":
		return rule{kind: ruleResetpass}, ""
	case "allkeys":
		return rule{kind: ruleAllkeys}, ""
	case "resetkeys":
		return rule{kind: ruleResetkeys}, ""
	case "allchannels":
		return rule{kind: ruleAllchannels}, ""
	case "resetchannels":
		return rule{kind: ruleResetchannels}, ""
	case "allcommands":
		return rule{kind: ruleAllowCategory, arg: "all"}, ""
	case "nocommands":
		return rule{kind: ruleDenyCategory, arg: "all"}, ""
	case "reset":
		return rule{kind: ruleReset}, ""
	case "clearselectors":
		return rule{kind: ruleClearSelectors}, ""
	}
	switch w[0] {
	case '>', '<':
		sum := sha256.Sum256([]byte(w[1:]))
		kind := ruleAddPass
		if w[0] == '<' {
			kind = ruleRemovePass
		}
		return rule{kind: kind, arg: string(sum[:])}, ""
	case '#', '!':
		// Redis's rule: exactly 64 lower-case hex digits.
		h := w[1:]
		if len(h) != 64 || strings.ToLower(h) != h {
			return r, "a password hash (#… or !…) must be 64 lower-case hex digits (SHA-256)"
		}
		sum, err := hex.DecodeString(h)
		if err != nil {
			return r, "a password hash (#… or !…) must be 64 lower-case hex digits (SHA-256)"
		}
		kind := ruleAddPass
		if w[0] == '!' {
			kind = ruleRemovePass
		}
		return rule{kind: kind, arg: string(sum)}, ""
	case '~':
		return rule{kind: ruleKey, arg: w[1:], read: true, write: true}, ""
	case '%':
		// %R~pattern, %W~pattern, %RW~pattern.
		perm, pattern, ok := strings.Cut(w[1:], "~")
		if !ok || perm == "" {
			return r, fmt.Sprintf("%q: expected %%R~pattern, %%W~pattern or %%RW~pattern", clip(w))
		}
		r = rule{kind: ruleKey, arg: pattern}
		for _, c := range strings.ToUpper(perm) {
			switch c {
			case 'R':
				r.read = true
			case 'W':
				r.write = true
			default:
				return rule{}, fmt.Sprintf("%q: key permissions are R, W or RW", clip(w))
			}
		}
		return r, ""
	case '&':
		return rule{kind: ruleChannel, arg: w[1:]}, ""
	case '+', '-':
		name := strings.ToLower(w[1:])
		allow := w[0] == '+'
		if strings.HasPrefix(name, "@") {
			cat := name[1:]
			if !knownCategory(cat) {
				return r, fmt.Sprintf("%q: unknown command category", clip(w))
			}
			if allow {
				return rule{kind: ruleAllowCategory, arg: cat}, ""
			}
			return rule{kind: ruleDenyCategory, arg: cat}, ""
		}
		if name == "" || strings.HasPrefix(name, "|") || strings.HasSuffix(name, "|") || strings.Count(name, "|") > 1 {
			return r, fmt.Sprintf("%q: expected +command, +command|subcommand or +@category", clip(w))
		}
		if allow {
			return rule{kind: ruleAllowCommand, arg: name}, ""
		}
		return rule{kind: ruleDenyCommand, arg: name}, ""
	case '(':
		return r, "selectors ( … ) are not supported by fenceproxy"
	}
	return r, fmt.Sprintf("unknown rule %q", clip(w))
}

// clip keeps error lines short.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// categories are Redis 7.0's ACL categories (ACL CAT) and fenceproxy's own.
var categories = []string{
	"keyspace", "read", "write", "set", "sortedset", "list", "hash", "string",
	"bitmap", "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow",
	"blocking", "dangerous", "connection", "transaction", "scripting",
	"lock", // fenceproxy: the lock family
}

func knownCategory(c string) bool {
	if c == "all" {
		return true
	}
	for _, k := range categories {
		if k == c {
			return true
		}
	}
	return false
}
