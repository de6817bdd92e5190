package keys

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadReply is returned by Load when its input is not a COMMAND reply.
var ErrBadReply = errors.New("keys: malformed COMMAND reply")

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadReply}, args...)...)
}

// maxName bounds the command names LookupBytes and subcommand matching
// lower-case on the stack; no Redis command name comes near it.
const maxName = 64

// maxPos bounds every position and count read from a key spec. Real specs
// use single digits; a larger number means the reply is not what this
// package understands, and the spec is treated as unknown.
const maxPos = 1 << 16

// Table is every command of one backend, built once by Load and read-only
// afterwards, so any number of goroutines may use it at once.
type Table struct {
	cmds map[string]*Command // by lower-case name; subcommands as "object|encoding"
}

// Load builds a Table from the reply to COMMAND: the RESP2 bytes exactly as
// Redis sent them. It fails only when the reply is not a COMMAND reply; a key
// spec it does not understand makes that command fall back to the legacy
// first/last/step triple (see the package doc). A Redis 6 reply, without key
// specs, loads with every command on the triple.
func Load(commandReply []byte) (*Table, error) {
	v, err := parseReply(commandReply)
	if err != nil {
		return nil, err
	}
	if v.kind != '*' {
		if v.kind == '-' {
			return nil, errorf("error reply %q", v.str)
		}
		return nil, errorf("not an array")
	}
	t := &Table{cmds: make(map[string]*Command, len(v.elems)*2)}
	for i, e := range v.elems {
		c, err := parseCommand(e, 0)
		if err != nil {
			return nil, fmt.Errorf("command %d: %w", i, err)
		}
		t.add(c)
	}
	return t, nil
}

func (t *Table) add(c *Command) {
	t.cmds[c.name] = c
	for _, s := range c.subs {
		t.add(s)
	}
}

// Lookup finds a command by its lower-case name ("get", "object"), or a
// subcommand by its full name ("object|encoding"); nil if unknown.
func (t *Table) Lookup(lowerName string) *Command { return t.cmds[lowerName] }

// LookupBytes is Lookup for a command name as the client sent it, in any
// case. It does not allocate.
func (t *Table) LookupBytes(name []byte) *Command {
	if t == nil {
		return nil // no table (COMMAND could not be read): no command is known
	}
	var buf [maxName]byte
	lower, ok := toLower(buf[:0], name)
	if !ok {
		return nil
	}
	return t.cmds[string(lower)]
}

// Len is the number of commands and subcommands in t.
func (t *Table) Len() int { return len(t.cmds) }

// Names lists every command and subcommand name in t, in no order.
func (t *Table) Names() []string {
	names := make([]string, 0, len(t.cmds))
	for n := range t.cmds {
		names = append(names, n)
	}
	return names
}

// parseCommand reads one command's array: name, arity, flags, first key,
// last key, step, ACL categories, tips, key specs, subcommands. Redis 6
// sends only the first six or seven.
func parseCommand(v value, depth int) (*Command, error) {
	if v.kind != '*' || len(v.elems) < 6 {
		return nil, errorf("command entry is not an array of at least 6 elements")
	}
	e := v.elems
	if !e[0].isString() || e[0].str == "" {
		return nil, errorf("command name is not a string")
	}
	if e[1].kind != ':' {
		return nil, errorf("%s: arity is not an integer", e[0].str)
	}
	for i := 3; i <= 5; i++ {
		if e[i].kind != ':' || e[i].num < -maxPos || e[i].num > maxPos {
			return nil, errorf("%s: element %d is not a small integer", e[0].str, i+1)
		}
	}
	c := &Command{
		name:  strings.ToLower(e[0].str),
		arity: int(e[1].num),
		first: int(e[3].num),
		last:  int(e[4].num),
		step:  int(e[5].num),
	}
	if e[2].kind == '*' {
		for _, f := range e[2].elems {
			if f.isString() {
				c.flagNames = append(c.flagNames, strings.ToLower(f.str))
				if equalFold([]byte(f.str), "movablekeys") {
					c.movable = true
				}
			}
		}
	}
	if len(e) > 6 && e[6].kind == '*' {
		for _, f := range e[6].elems {
			if f.isString() {
				c.acl = append(c.acl, strings.TrimPrefix(strings.ToLower(f.str), "@"))
			}
		}
	}
	if len(e) > 8 && e[8].kind == '*' {
		for _, sv := range e[8].elems {
			s := parseSpec(sv)
			c.specs = append(c.specs, s)
			if s.bs == bsUnknown || s.fk == fkUnknown {
				c.legacy = true
			}
		}
		c.notKey = len(c.specs) > 0
		for _, s := range c.specs {
			c.notKey = c.notKey && s.notKey
		}
	} else {
		c.legacy = true // Redis 6: no key specs
	}
	if c.step < 1 {
		c.step = 1 // a triple with no keys has first 0; never loop without advancing
	}
	if len(e) > 9 && e[9].kind == '*' && len(e[9].elems) > 0 {
		if depth > 0 {
			return nil, errorf("%s: subcommands of a subcommand", c.name)
		}
		c.subs = make(map[string]*Command, len(e[9].elems))
		for _, sv := range e[9].elems {
			s, err := parseCommand(sv, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			_, sub, ok := strings.Cut(s.name, "|")
			if !ok || sub == "" || len(sub) > maxName {
				return nil, errorf("%s: subcommand name %q is not %s|name", c.name, s.name, c.name)
			}
			c.subs[sub] = s
		}
	}
	return c, nil
}

// parseSpec reads one key spec; what it cannot read becomes bsUnknown or
// fkUnknown, which sends the command to the legacy triple.
func parseSpec(v value) keySpec {
	var s keySpec
	if flags, ok := v.field("flags"); ok {
		for _, f := range flags.elems {
			switch {
			case equalFold([]byte(f.str), "not_key"):
				s.notKey = true
			case equalFold([]byte(f.str), "incomplete"):
				s.incomplete = true
			case equalFold([]byte(f.str), "access"):
				s.read = true
			case equalFold([]byte(f.str), "insert"), equalFold([]byte(f.str), "delete"), equalFold([]byte(f.str), "update"):
				s.write = true
			}
		}
	}
	if bs, ok := v.field("begin_search"); ok {
		typ, _ := bs.field("type")
		spec, _ := bs.field("spec")
		switch {
		case equalFold([]byte(typ.str), "index"):
			if pos, ok := intField(spec, "index"); ok && pos >= 1 {
				s.bs, s.pos = bsIndex, pos
			}
		case equalFold([]byte(typ.str), "keyword"):
			kw, _ := spec.field("keyword")
			from, ok := intField(spec, "startfrom")
			if ok && kw.isString() && kw.str != "" && len(kw.str) <= maxName {
				s.bs, s.pos, s.keyword = bsKeyword, from, kw.str
			}
		}
	}
	if fk, ok := v.field("find_keys"); ok {
		typ, _ := fk.field("type")
		spec, _ := fk.field("spec")
		switch {
		case equalFold([]byte(typ.str), "range"):
			last, ok1 := intField(spec, "lastkey")
			step, ok2 := intField(spec, "keystep")
			limit, ok3 := intField(spec, "limit")
			if ok1 && ok2 && ok3 && step >= 1 && limit >= 0 {
				s.fk, s.lastKey, s.keyStep, s.limit = fkRange, last, step, limit
			}
		case equalFold([]byte(typ.str), "keynum"):
			idx, ok1 := intField(spec, "keynumidx")
			first, ok2 := intField(spec, "firstkey")
			step, ok3 := intField(spec, "keystep")
			if ok1 && ok2 && ok3 && idx >= 0 && first >= 0 && step >= 1 {
				s.fk, s.keyNumIdx, s.firstKey, s.keyStep = fkKeynum, idx, first, step
			}
		}
	}
	return s
}

// intField is v.field(name) as a small integer.
func intField(v value, name string) (int, bool) {
	f, ok := v.field(name)
	if !ok || f.kind != ':' || f.num < -maxPos || f.num > maxPos {
		return 0, false
	}
	return int(f.num), true
}
