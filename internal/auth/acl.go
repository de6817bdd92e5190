package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"sort"
	"strings"
)

// DefaultUser is the user a connection starts as, and the one
// --requirepass gives a password to.
const DefaultUser = "default"

// Command is one command the backend or fenceproxy knows, for Compile:
// its lower-case name ("get", "config|get" for a subcommand,
// "lock.acquire") and its ACL categories without '@'.
type Command struct {
	Name       string
	Categories []string
}

// User is one compiled user. It is read-only after Compile, so any number
// of connections may share it.
type User struct {
	name      string
	enabled   bool
	nopass    bool
	passwords [][sha256.Size]byte

	// allCommands: +@all with nothing taken away since, which also covers
	// commands the backend did not list at start (Redis's
	// USER_FLAG_ALLCOMMANDS).
	allCommands bool
	allowed     map[string]bool // by full lower-case name

	allKeys bool
	keys    []keyPattern

	allChannels bool
	channels    [][]byte
}

type keyPattern struct {
	pattern     []byte
	read, write bool
}

// Name is the user's name.
func (u *User) Name() string { return u.name }

// Enabled reports "on".
func (u *User) Enabled() bool { return u.enabled }

// NoPass reports "nopass": any password authenticates it.
func (u *User) NoPass() bool { return u.nopass }

// CanRun reports whether u may run the command with this full lower-case
// name ("get", "config|get", "lock.acquire"). A name Compile never saw is
// allowed only with +@all. It does not allocate.
func (u *User) CanRun(name string) bool {
	if ok, known := u.allowed[name]; known {
		return ok
	}
	return u.allCommands
}

// AllCommands reports +@all with nothing denied after it.
func (u *User) AllCommands() bool { return u.allCommands }

// AllKeys reports allkeys (or ~*): every key, read and write.
func (u *User) AllKeys() bool { return u.allKeys }

// CanKey reports whether u may use key as asked: read and/or write (both
// false: any key pattern of u that matches allows it, as in Redis). It
// does not allocate.
func (u *User) CanKey(key []byte, read, write bool) bool {
	if u.allKeys {
		return true
	}
	for i := range u.keys {
		p := &u.keys[i]
		if (read && !p.read) || (write && !p.write) {
			continue
		}
		if Match(p.pattern, key) {
			return true
		}
	}
	return false
}

// AllChannels reports allchannels (or &*).
func (u *User) AllChannels() bool { return u.allChannels }

// CanChannel reports whether u may use channel. A PSUBSCRIBE pattern
// (literal true) must equal one of u's channel patterns, as Redis 7.0
// requires; a channel must match one.
func (u *User) CanChannel(channel []byte, literal bool) bool {
	if u.allChannels {
		return true
	}
	for _, p := range u.channels {
		if literal {
			if string(p) == string(channel) {
				return true
			}
		} else if Match(p, channel) {
			return true
		}
	}
	return false
}

// ACL is the compiled set of users. Read-only after Compile.
type ACL struct {
	users map[string]*User
	dflt  *User
}

// Users lists the users' names, sorted.
func (a *ACL) Users() []string {
	names := make([]string, 0, len(a.users))
	for n := range a.users {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ScriptingUsers names the enabled users confined to key patterns who may
// still run scripts, which can reach keys beyond those patterns (see the
// package doc).
func (a *ACL) ScriptingUsers() []string {
	var names []string
	for _, name := range a.Users() {
		u := a.users[name]
		if !u.enabled || u.allKeys {
			continue
		}
		for _, cmd := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"} {
			if u.CanRun(cmd) {
				names = append(names, name)
				break
			}
		}
	}
	return names
}

// User returns a user by name, nil if there is none.
func (a *ACL) User(name string) *User { return a.users[name] }

// Initial is the user a new (or RESET) connection is authenticated as:
// "default" if it is on and needs no password, else nil (the connection
// must AUTH first).
func (a *ACL) Initial() *User {
	if a.dflt.enabled && a.dflt.nopass {
		return a.dflt
	}
	return nil
}

// Default is the "default" user.
func (a *ACL) Default() *User { return a.dflt }

// Authenticate returns the user name and password designate, or nil when
// the user does not exist, is off, or the password is wrong (the client
// cannot tell which: Redis's WRONGPASS). The password is hashed and
// compared with every stored digest in constant time.
func (a *ACL) Authenticate(name, password []byte) *User {
	u := a.users[string(name)]
	sum := sha256.Sum256(password)
	if u == nil {
		return nil
	}
	ok := u.nopass
	for i := range u.passwords {
		if subtle.ConstantTimeCompare(sum[:], u.passwords[i][:]) == 1 {
			ok = true
		}
	}
	if !ok || !u.enabled {
		return nil
	}
	return u
}

// Compile resolves specs (from Parse) and requirepass against commands:
// those the backend knows (its COMMAND reply, with subcommands as
// "container|sub") and fenceproxy's own (the lock family, with @lock), as
// the caller lists them (commands.ACLCommands). requirepass, if not
// empty, is the default user's password, as Redis's requirepass; setting
// it and also defining "default" in the file is refused (one source for
// one password). An unknown command name in a rule is refused with the
// file and line.
func Compile(specs []UserSpec, requirepass string, commands []Command) (*ACL, error) {
	u := universe{byName: map[string]*Command{}, subs: map[string][]string{}, byCat: map[string][]string{}}
	for i := range commands {
		u.add(&commands[i])
	}
	a := &ACL{users: map[string]*User{}}
	for i := range specs {
		s := &specs[i]
		if s.Name == DefaultUser && requirepass != "" {
			return nil, fmt.Errorf("%w: %s:%d: --requirepass sets the default user's password and the file defines user \"default\" too; use one of them",
				ErrSyntax, s.File, s.Line)
		}
		user := newUser(s.Name)
		for _, r := range s.rules {
			if err := user.apply(r, &u); err != "" {
				return nil, fmt.Errorf("%w: %s:%d: user %q, rule %d: %s", ErrSyntax, s.File, s.Line, s.Name, r.word-2, err)
			}
		}
		a.users[s.Name] = user
	}
	if a.users[DefaultUser] == nil {
		// Redis's default user: on nopass ~* &* +@all.
		d := newUser(DefaultUser)
		for _, r := range []rule{{kind: ruleOn}, {kind: ruleNopass}, {kind: ruleAllkeys}, {kind: ruleAllchannels}, {kind: ruleAllowCategory, arg: "all"}} {
			d.apply(r, &u)
		}
		if requirepass != "" {
			sum := sha256.Sum256([]byte(requirepass))
			d.apply(rule{kind: ruleResetpass}, &u)
			d.apply(rule{kind: ruleAddPass, arg: string(sum[:])}, &u)
		}
		a.users[DefaultUser] = d
	}
	a.dflt = a.users[DefaultUser]
	return a, nil
}

// universe is every command Compile knows, indexed for the rules.
type universe struct {
	byName map[string]*Command
	subs   map[string][]string // container -> full names of its subcommands
	byCat  map[string][]string // category -> full names
	all    []string
}

func (u *universe) add(c *Command) {
	u.byName[c.Name] = c
	u.all = append(u.all, c.Name)
	if container, _, ok := strings.Cut(c.Name, "|"); ok {
		u.subs[container] = append(u.subs[container], c.Name)
	}
	for _, cat := range c.Categories {
		u.byCat[cat] = append(u.byCat[cat], c.Name)
	}
}

// newUser is a user as ACL SETUSER creates it in Redis 7.0: off, no
// passwords, no keys, no channels (acl-pubsub-default resetchannels), no
// commands.
func newUser(name string) *User {
	return &User{name: name, allowed: map[string]bool{}}
}

// apply applies one rule; it returns what is wrong with it, "" if nothing.
func (usr *User) apply(r rule, u *universe) string {
	switch r.kind {
	case ruleOn:
		usr.enabled = true
	case ruleOff:
		usr.enabled = false
	case ruleNopass:
		usr.nopass, usr.passwords = true, nil
	case ruleResetpass:
		usr.nopass, usr.passwords = false, nil
	case ruleAddPass:
		var sum [sha256.Size]byte
		copy(sum[:], r.arg)
		usr.nopass = false
		for _, p := range usr.passwords {
			if p == sum {
				return ""
			}
		}
		usr.passwords = append(usr.passwords, sum)
	case ruleRemovePass:
		var sum [sha256.Size]byte
		copy(sum[:], r.arg)
		kept := usr.passwords[:0]
		found := false
		for _, p := range usr.passwords {
			if p == sum {
				found = true
				continue
			}
			kept = append(kept, p)
		}
		if !found {
			// Redis: "The password you are trying to remove from the
			// user does not exist".
			return "the password to remove (<… or !…) is not one of the user's"
		}
		usr.passwords = kept
	case ruleKey:
		if r.arg == "*" && r.read && r.write {
			usr.allKeys = true
		}
		usr.keys = append(usr.keys, keyPattern{pattern: []byte(r.arg), read: r.read, write: r.write})
	case ruleAllkeys:
		usr.allKeys = true
		usr.keys = append(usr.keys, keyPattern{pattern: []byte("*"), read: true, write: true})
	case ruleResetkeys:
		usr.allKeys, usr.keys = false, nil
	case ruleChannel:
		if r.arg == "*" {
			usr.allChannels = true
		}
		usr.channels = append(usr.channels, []byte(r.arg))
	case ruleAllchannels:
		usr.allChannels = true
		usr.channels = append(usr.channels, []byte("*"))
	case ruleResetchannels:
		usr.allChannels, usr.channels = false, nil
	case ruleAllowCategory, ruleDenyCategory:
		allow := r.kind == ruleAllowCategory
		names := u.all
		if r.arg != "all" {
			names = u.byCat[r.arg]
		}
		for _, n := range names {
			usr.allowed[n] = allow
		}
		switch {
		case r.arg == "all":
			usr.allCommands = allow
		case !allow:
			usr.allCommands = false
		}
	case ruleAllowCommand, ruleDenyCommand:
		allow := r.kind == ruleAllowCommand
		if u.byName[r.arg] == nil {
			return fmt.Sprintf("unknown command %q (not in the backend's COMMAND nor fenceproxy's)", clip(r.arg))
		}
		usr.allowed[r.arg] = allow
		if !strings.Contains(r.arg, "|") {
			for _, sub := range u.subs[r.arg] {
				usr.allowed[sub] = allow
			}
		}
		if !allow {
			usr.allCommands = false
		}
	case ruleReset:
		*usr = *newUser(usr.name)
	case ruleClearSelectors:
	}
	return ""
}
