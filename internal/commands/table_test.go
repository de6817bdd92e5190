package commands

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestTableEntries checks each entry of the command table for what its
// readers rely on: the categories the flags give (a lock command without
// @lock or a write without @write fails here), a resource argument that
// every request of a valid arity has, a syntax that reads back as written.
func TestTableEntries(t *testing.T) {
	for i := range table {
		e := &table[i]
		if e.serve == nil {
			t.Errorf("%s: no serve function", e.name)
		}
		if byName[e.name] != e {
			t.Errorf("%s: not indexed (a duplicate name?)", e.name)
		}
		if e.flags&flagOwn == 0 {
			if e.flags&(flagLock|flagWrite|flagReadonly|flagAdmin|flagFast|flagWritesResource|flagMovableKeys) != 0 || e.resource != 0 || e.syntax != "" {
				t.Errorf("%s: Redis's command with flags or docs of the proxy's own: Redis's COMMAND describes it", e.name)
			}
			continue
		}
		has := func(cat string) bool { return slices.Contains(e.categories, cat) }
		for _, c := range []struct {
			flag flags
			cat  string
		}{{flagLock, "lock"}, {flagWrite, "write"}, {flagReadonly, "read"}, {flagAdmin, "admin"}, {flagFast, "fast"}} {
			if (e.flags&c.flag != 0) != has(c.cat) {
				t.Errorf("%s: flag for @%s %v, categories %q", e.name, c.cat, e.flags&c.flag != 0, e.categories)
			}
		}
		if has("fast") == has("slow") || has("admin") != has("dangerous") {
			t.Errorf("%s: categories %q: want one of @fast and @slow, and @dangerous with @admin", e.name, e.categories)
		}
		if e.flags&(flagWrite|flagReadonly|flagAdmin) == 0 || e.flags&flagWrite != 0 && e.flags&flagReadonly != 0 {
			t.Errorf("%s: must be one of write, readonly (or admin)", e.name)
		}
		if e.flags&flagWritesResource != 0 && (e.flags&flagWrite == 0 || e.resource == 0) {
			t.Errorf("%s: changes its resource's lease, so it is a write with a resource", e.name)
		}
		if e.flags&flagLock == 0 {
			t.Errorf("%s: the proxy's own commands are the lock family", e.name)
		}
		min := max(e.arity, -e.arity) // arguments every request that passes arity has
		if e.resource >= min || e.fenced >= min || (e.fenced > 0 && e.resource == 0) {
			t.Errorf("%s: resource %d, fenced %d, beyond the %d arguments arity %d guarantees", e.name, e.resource, e.fenced, min, e.arity)
		}
		if e.summary == "" {
			t.Errorf("%s: no summary for COMMAND DOCS", e.name)
		}
		if got := renderArgs(docsOf(e.docs)); got != cliSyntax(e.syntax) {
			t.Errorf("%s: COMMAND DOCS arguments read back as %q, want %q", e.name, got, cliSyntax(e.syntax))
		}
	}
}

// TestTableFeedsACL: the ACL universe built from the backend's COMMAND and
// the table gives each of the proxy's commands its categories, so that
// rules by category allow and deny them as their entries say.
func TestTableFeedsACL(t *testing.T) {
	h := aclHandler(t, strings.Join([]string{
		"user locker on nopass ~* -@all +@lock",
		"user nolock on nopass ~* +@all -@lock",
		"user nowrite on nopass ~* +@all -@write",
		"user reader on nopass ~* -@all +@read",
		"user admin on nopass ~* -@all +@admin",
	}, "\n")+"\n")
	a := h.opts.ACL
	for _, e := range ownCommands {
		for _, c := range []struct {
			user string
			want bool
		}{
			{"locker", true},
			{"nolock", false},
			{"nowrite", e.flags&flagWrite == 0},
			{"reader", e.flags&flagReadonly != 0},
			{"admin", e.flags&flagAdmin != 0},
		} {
			if got := a.User(c.user).CanRun(e.name); got != c.want {
				t.Errorf("%s may run %s: %v, want %v (categories %q)", c.user, e.name, got, c.want, e.categories)
			}
		}
	}
}

// TestCommandAnswersOwnCommands: a client asking the proxy COMMAND finds
// each of the proxy's own commands in Redis 7's shape, as its table entry
// says, beside Redis's; COUNT, LIST, INFO and DOCS agree.
func TestCommandAnswersOwnCommands(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: r.Addr})
	direct := testenv.Dial(t, r.Addr)
	c := testenv.Dial(t, p.Addr)

	var names []string
	for _, e := range ownCommands {
		names = append(names, strings.ToUpper(e.name))
	}
	info := c.Do(append([]string{"COMMAND", "INFO"}, names...)...)
	kt, err := keys.Load(info)
	if err != nil {
		t.Fatalf("COMMAND INFO %s: %v (%q)", strings.Join(names, " "), err, info)
	}
	aclUniverse := map[string][]string{}
	for _, ac := range ACLCommands(kt) {
		aclUniverse[ac.Name] = ac.Categories
	}
	for _, e := range ownCommands {
		cmd := kt.Lookup(e.name)
		if cmd == nil {
			t.Errorf("COMMAND INFO has no %s", e.name)
			continue
		}
		if cmd.Arity() != e.arity {
			t.Errorf("%s: COMMAND INFO arity %d, table %d", e.name, cmd.Arity(), e.arity)
		}
		if !slices.Equal(cmd.Categories(), e.categories) || !slices.Equal(aclUniverse[e.name], e.categories) {
			t.Errorf("%s: COMMAND INFO categories %q, the ACL's %q, table %q", e.name, cmd.Categories(), aclUniverse[e.name], e.categories)
		}
		if cmd.HasFlag("write") != (e.flags&flagWrite != 0) || cmd.HasFlag("readonly") != (e.flags&flagReadonly != 0) ||
			cmd.HasFlag("admin") != (e.flags&flagAdmin != 0) || cmd.HasFlag("fast") != (e.flags&flagFast != 0) ||
			cmd.Movable() != (e.flags&flagMovableKeys != 0) {
			t.Errorf("%s: COMMAND INFO flags disagree with the table's", e.name)
		}
		if cmd.HasFlag("write") && !slices.Contains(cmd.Categories(), "write") || e.flags&flagLock != 0 && !slices.Contains(cmd.Categories(), "lock") {
			t.Errorf("%s: COMMAND INFO categories %q lack @write or @lock", e.name, cmd.Categories())
		}
		// The key COMMAND shows is the resource, with the access the ACL
		// checks it for.
		req := sampleRequest(e)
		var want []keys.KeyRef
		if e.resource > 0 {
			want = []keys.KeyRef{{Pos: e.resource, Read: true, Write: e.flags&flagWritesResource != 0}}
		}
		if got := cmd.KeyRefs(nil, req); !slices.Equal(got, want) {
			t.Errorf("%s: keys of %q by COMMAND INFO %+v, want %+v", e.name, req, got, want)
		}
	}

	// Mixed with Redis's commands: in the order asked, Redis's entries as
	// Redis gives them, null for an unknown name.
	mixed, ok := testenv.SplitArray(c.Do("COMMAND", "INFO", "get", "LOCK.ACQUIRE", "nosuch", "lpop"))
	theirs, _ := testenv.SplitArray(direct.Do("COMMAND", "INFO", "get", "nosuch", "lpop"))
	ours, _ := testenv.SplitArray(c.Do("COMMAND", "INFO", "lock.acquire"))
	if !ok || len(mixed) != 4 || string(mixed[0]) != string(theirs[0]) || string(mixed[1]) != string(ours[0]) ||
		string(mixed[2]) != "$-1\r\n" || string(mixed[3]) != string(theirs[2]) {
		t.Errorf("COMMAND INFO get LOCK.ACQUIRE nosuch lpop = %q", mixed)
	}

	redisCount, _ := testenv.ParseInt(direct.Do("COMMAND", "COUNT"))
	count, _ := testenv.ParseInt(c.Do("COMMAND", "COUNT"))
	all, err := keys.Load(c.Do("COMMAND"))
	if err != nil {
		t.Fatalf("COMMAND: %v", err)
	}
	allEntries, _ := testenv.SplitArray(c.Do("COMMAND"))
	if count != redisCount+int64(len(ownCommands)) || len(allEntries) != int(count) || all.Lookup("lock.acquire") == nil || all.Lookup("get") == nil {
		t.Errorf("COMMAND COUNT %d (Redis's %d), COMMAND has %d entries; want Redis's and the proxy's %d", count, redisCount, len(allEntries), len(ownCommands))
	}
	list, _ := testenv.SplitArray(c.Do("COMMAND", "LIST"))
	redisList, _ := testenv.SplitArray(direct.Do("COMMAND", "LIST"))
	if len(list) != len(redisList)+len(ownCommands) {
		t.Errorf("COMMAND LIST has %d names, Redis's %d", len(list), len(redisList))
	}
	for _, filter := range [][]string{{"ACLCAT", "lock"}, {"PATTERN", "LOCK.*"}, {"pattern", "*"}, {"aclcat", "write"}, {"MODULE", "x"}} {
		got := bulks(t, c.Do("COMMAND", "LIST", "FILTERBY", filter[0], filter[1]))
		theirs := bulks(t, direct.Do("COMMAND", "LIST", "FILTERBY", filter[0], filter[1]))
		var want []string
		for _, e := range ownCommands {
			switch strings.ToLower(filter[0]) {
			case "aclcat":
				if slices.Contains(e.categories, filter[1]) {
					want = append(want, e.name)
				}
			case "pattern":
				if auth.Match([]byte(strings.ToLower(filter[1])), []byte(e.name)) {
					want = append(want, e.name)
				}
			}
		}
		if !slices.Equal(got, append(theirs, want...)) {
			t.Errorf("COMMAND LIST FILTERBY %s: %q, want Redis's then %q", filter, got, want)
		}
	}

	// A real client's reading of COMMAND, in both protocols (go-redis's
	// cluster client reads it to route).
	for _, proto := range []int{2, 3} {
		rc := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: proto})
		cmds, err := rc.Command(context.Background()).Result()
		rc.Close()
		if err != nil {
			t.Fatalf("RESP%d: go-redis Command: %v", proto, err)
		}
		for _, e := range ownCommands {
			ci := cmds[e.name]
			if ci == nil || int(ci.Arity) != e.arity || int(ci.FirstKeyPos) != e.resource || ci.ReadOnly != (e.flags&flagReadonly != 0) {
				t.Errorf("RESP%d: go-redis reads %s as %+v", proto, e.name, ci)
			}
		}
		if cmds["get"] == nil {
			t.Errorf("RESP%d: go-redis reads no GET in COMMAND", proto)
		}
	}

	// COMMAND DOCS, as redis-cli reads it for help and hints: each of ours
	// with its summary, group and arguments, in both protocols.
	for _, proto := range []int{2, 3} {
		rc := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: proto})
		for _, req := range [][]any{{"COMMAND", "DOCS"}, append([]any{"COMMAND", "DOCS", "get"}, anys(names)...)} {
			v, err := rc.Do(context.Background(), req...).Result()
			if err != nil {
				t.Fatalf("RESP%d: %q: %v", proto, req, err)
			}
			docs := asMap(t, v)
			if docs["get"] == nil {
				t.Errorf("RESP%d: %q has no docs of GET", proto, req)
			}
			for _, e := range ownCommands {
				d := asMap(t, docs[e.name])
				if d["summary"] != e.summary || d["group"] != docsGroup {
					t.Errorf("RESP%d: docs of %s: %v", proto, e.name, d)
					continue
				}
				if got := renderArgs(d["arguments"]); got != cliSyntax(e.syntax) {
					t.Errorf("RESP%d: docs of %s read as %q, want %q", proto, e.name, got, cliSyntax(e.syntax))
				}
			}
		}
		rc.Close()
	}
	if r := string(c.Do("COMMAND", "DOCS", "nosuch")); r != "*0\r\n" {
		t.Errorf("COMMAND DOCS nosuch = %q, want Redis's empty reply", r)
	}
	if r := string(c.Do("COMMAND", "COUNT", "x")); !strings.HasPrefix(r, "-ERR wrong number of arguments") {
		t.Errorf("COMMAND COUNT x = %q, want Redis's error", r)
	}
}

// TestDispatchAllocations: dispatching a request through the table
// allocates nothing (ECHO, answered by the proxy; an arity-checked local
// command). PING is Redis's to answer (control.go).
func TestDispatchAllocations(t *testing.T) {
	h := NewHandler(Options{Metrics: metrics.New()})
	c := &protocol.Conn{}
	p := resp.NewReplyFunc(func() {})
	for _, req := range [][][]byte{args("echo", "x"), args("ECHO", "hello"), args("SELECT", "0")} {
		serve := func() {
			p.Buf = p.Buf[:0]
			h.ServeCommand(c, req, p)
		}
		serve()
		if n := testing.AllocsPerRun(100, serve); n != 0 {
			t.Errorf("%q: %v allocations, want 0", req, n)
		}
	}
}

// sampleRequest is a request for e that passes its arity: its name and a
// word for each argument its syntax does not make optional.
func sampleRequest(e *command) [][]byte {
	req := [][]byte{[]byte(e.name)}
	for _, a := range e.docs {
		if !a.optional {
			req = append(req, []byte("x-"+a.name))
		}
	}
	return req
}

// docsOf is docs as go-redis reads COMMAND DOCS's arguments in RESP3.
func docsOf(args []docArg) []any {
	var out []any
	for _, a := range args {
		m := map[any]any{"name": a.name, "type": a.typ}
		if a.token != "" {
			m["token"] = a.token
		}
		var flags []any
		if a.optional {
			flags = append(flags, "optional")
		}
		if a.multiple {
			flags = append(flags, "multiple")
		}
		if flags != nil {
			m["flags"] = flags
		}
		if a.oneof != nil {
			m["arguments"] = docsOf(a.oneof)
		}
		out = append(out, m)
	}
	return out
}

// renderArgs writes COMMAND DOCS's arguments as redis-cli 7.0 writes them
// in its help and hints (cliAddArgument).
func renderArgs(v any) string {
	list, _ := v.([]any)
	var parts []string
	for _, x := range list {
		m := toMap(x)
		name, _ := m["name"].(string)
		typ, _ := m["type"].(string)
		token, _ := m["token"].(string)
		var optional, multiple bool
		flags, _ := m["flags"].([]any)
		if set, ok := m["flags"].(map[any]struct{}); ok {
			for f := range set {
				flags = append(flags, f)
			}
		}
		for _, f := range flags {
			optional = optional || f == "optional"
			multiple = multiple || f == "multiple"
		}
		repeat := name
		switch typ {
		case "oneof":
			var alts []string
			for _, sub := range m["arguments"].([]any) {
				alts = append(alts, renderArgs([]any{sub}))
			}
			repeat = strings.Join(alts, "|")
		case "pure-token":
			repeat = ""
		}
		s := token
		if token != "" && typ != "pure-token" {
			s += " "
		}
		s += repeat
		if multiple {
			s += " [" + repeat + " ...]"
		}
		if optional {
			s = "[" + s + "]"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// cliSyntax is syntax as redis-cli writes it: a repeated argument
// "[arg ...]" as "[arg [arg ...]]", as it writes EVAL's.
func cliSyntax(syntax string) string {
	words := strings.Fields(syntax)
	for i := 1; i < len(words); i++ {
		if words[i] == "...]" && strings.HasPrefix(words[i-1], "[") {
			name := words[i-1][1:]
			words[i] = "[" + name + " ...]]"
		}
	}
	return strings.Join(words, " ")
}

// toMap reads a map as go-redis returns it: a map in RESP3, a flat list
// of pairs in RESP2.
func toMap(v any) map[any]any {
	switch m := v.(type) {
	case map[any]any:
		return m
	case map[string]any:
		out := map[any]any{}
		for k, x := range m {
			out[k] = x
		}
		return out
	case []any:
		out := map[any]any{}
		for i := 0; i+1 < len(m); i += 2 {
			out[m[i]] = m[i+1]
		}
		return out
	}
	return nil
}

func asMap(t *testing.T, v any) map[any]any {
	t.Helper()
	m := toMap(v)
	if m == nil {
		t.Fatalf("not a map: %T %v", v, v)
	}
	return m
}

func bulks(t *testing.T, reply []byte) []string {
	t.Helper()
	elems, ok := testenv.SplitArray(reply)
	if !ok {
		t.Fatalf("not an array: %q", reply)
	}
	var out []string
	for _, e := range elems {
		b, ok := testenv.ParseBulk(e)
		if !ok {
			t.Fatalf("not a bulk string: %q", e)
		}
		out = append(out, string(b))
	}
	return out
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}
