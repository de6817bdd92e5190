package commands

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// COMMAND, with the proxy's own commands in it. Redis answers COMMAND about
// its commands and knows nothing of the lock family, yet clients read
// COMMAND to learn what they may send: redis-cli builds its help and hints
// from COMMAND DOCS, client libraries look a command's keys and flags up
// with COMMAND INFO. So the proxy asks Redis as before and adds an entry
// for each of its own commands (flagOwn in the table), in Redis 7's shapes
// and in the client's protocol (RESP2 or RESP3):
//
//   - COMMAND, COMMAND INFO without names: Redis's entries, then ours.
//   - COMMAND INFO name...: one entry per name, in the order asked (null
//     for a name nobody knows, as Redis answers); ours from the table,
//     the rest from Redis, which is asked only about those (not at all if
//     every name is ours).
//   - COMMAND COUNT: Redis's count plus ours.
//   - COMMAND LIST [FILTERBY MODULE m | ACLCAT c | PATTERN p]: Redis's
//     names, then ours that pass the filter (none is a module's).
//   - COMMAND DOCS [name...]: Redis's docs, then ours (those asked for).
//
// Everything else (COMMAND GETKEYS, HELP, any error) is Redis's answer
// alone, and so is COMMAND queued inside MULTI (EXEC's reply is Redis's).
//
// An entry of ours says what the table says: arity; flags (write or
// readonly, admin, fast; noscript and no_multi, since Redis runs neither
// scripts nor transactions with them; movablekeys for FENCE.EXEC); the
// resource as the key (first, last and step, and a key spec: RW with ACCESS
// and UPDATE for the commands that change a lease, RO with ACCESS for the
// others), the ACL categories; no tips and no subcommands.

// ownCommand is the own command named name (any case), nil if none.
func ownCommand(name []byte) *command {
	if len(name) > 32 {
		return nil
	}
	var lower [32]byte
	if e := lookup(lowerInto(lower[:0], name)); e != nil && e.flags&flagOwn != 0 {
		return e
	}
	return nil
}

// command is COMMAND (see above).
func (h *Handler) command(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	resp3 := sessionOf(c).backend.RESP3
	sub := ""
	if len(args) > 1 {
		sub = lowerName(args[1])
	}
	switch {
	case len(args) == 1, sub == "info" && len(args) == 2:
		h.askRedis(c, args, p, withMore(len(ownCommands), func(dst []byte) []byte {
			for _, e := range ownCommands {
				dst = e.appendInfo(dst, resp3)
			}
			return dst
		}))
	case sub == "info":
		h.commandInfo(c, args, p, resp3)
	case sub == "count" && len(args) == 2:
		h.askRedis(c, args, p, func(reply, dst []byte) []byte {
			n, ok := parseInt(bytes.TrimSuffix(reply[1:], []byte("\r\n")))
			if reply[0] != ':' || !ok {
				return append(dst, reply...)
			}
			return redcon.AppendInt(dst, n+int64(len(ownCommands)))
		})
	case sub == "list":
		names, ok := listed(args[2:])
		if !ok {
			h.forward(c, args, p) // Redis's syntax error
			return
		}
		h.askRedis(c, args, p, withMore(len(names), func(dst []byte) []byte {
			for _, n := range names {
				dst = redcon.AppendBulkString(dst, n)
			}
			return dst
		}))
	case sub == "docs":
		h.commandDocs(c, args, p, resp3)
	default:
		h.forward(c, args, p)
	}
}

// commandInfo is COMMAND INFO name...
func (h *Handler) commandInfo(c *protocol.Conn, args [][]byte, p *resp.Reply, resp3 bool) {
	names := args[2:]
	ours := make([]*command, len(names)) // nil: Redis's to answer
	theirs := [][]byte{args[0], args[1]}
	for i, n := range names {
		if ours[i] = ownCommand(n); ours[i] == nil {
			theirs = append(theirs, n)
		}
	}
	if len(theirs) == len(args) {
		h.forward(c, args, p) // none is ours
		return
	}
	answer := func(redis [][]byte, dst []byte) []byte {
		dst = redcon.AppendArray(dst, len(ours))
		for _, e := range ours {
			if e != nil {
				dst = e.appendInfo(dst, resp3)
			} else {
				dst, redis = append(dst, redis[0]...), redis[1:]
			}
		}
		return dst
	}
	if len(theirs) == 2 { // every name is ours
		p.Buf = answer(nil, p.Buf)
		p.Done()
		return
	}
	h.askRedis(c, theirs, p, func(reply, dst []byte) []byte {
		elems, ok := resp.Elements(reply)
		if !ok || len(elems) != len(theirs)-2 {
			return append(dst, reply...)
		}
		return answer(elems, dst)
	})
}

// commandDocs is COMMAND DOCS [name...]: a map from name to docs (RESP2:
// a flat array), Redis's pairs first. Redis leaves out names it does not
// know, and so does the proxy.
func (h *Handler) commandDocs(c *protocol.Conn, args [][]byte, p *resp.Reply, resp3 bool) {
	ours := ownCommands
	theirs := args
	if len(args) > 2 {
		ours, theirs = nil, [][]byte{args[0], args[1]}
		for _, n := range args[2:] {
			if e := ownCommand(n); e == nil {
				theirs = append(theirs, n)
			} else if !containsCommand(ours, e) {
				ours = append(ours, e)
			}
		}
		if len(ours) == 0 {
			h.forward(c, args, p)
			return
		}
	}
	answer := func(pairs int, body, dst []byte) []byte {
		dst = appendMap(dst, pairs+len(ours), resp3)
		dst = append(dst, body...)
		for _, e := range ours {
			dst = redcon.AppendBulkString(dst, e.name)
			dst = e.appendDocs(dst, resp3)
		}
		return dst
	}
	if len(theirs) == 2 && len(args) > 2 { // every name is ours
		p.Buf = answer(0, nil, p.Buf)
		p.Done()
		return
	}
	h.askRedis(c, theirs, p, func(reply, dst []byte) []byte {
		pairs, body, ok := mapBody(reply)
		if !ok {
			return append(dst, reply...)
		}
		return answer(pairs, body, dst)
	})
}

func containsCommand(list []*command, e *command) bool {
	for _, x := range list {
		if x == e {
			return true
		}
	}
	return false
}

// listed is the names of our commands COMMAND LIST shows with these
// arguments (after LIST); ok is false for arguments Redis refuses.
func listed(args [][]byte) (names []string, ok bool) {
	if len(args) == 0 {
		for _, e := range ownCommands {
			names = append(names, e.name)
		}
		return names, true
	}
	if len(args) != 3 || !strings.EqualFold(string(args[0]), "filterby") {
		return nil, false
	}
	value := strings.ToLower(string(args[2]))
	var passes func(e *command) bool
	switch strings.ToLower(string(args[1])) {
	case "module":
		return nil, true // none of ours is a module's
	case "aclcat":
		passes = func(e *command) bool {
			for _, cat := range e.categories {
				if cat == value {
					return true
				}
			}
			return false
		}
	case "pattern":
		// Redis matches without regard to case; our names are lower case.
		passes = func(e *command) bool { return auth.Match([]byte(value), []byte(e.name)) }
	default:
		return nil, false
	}
	for _, e := range ownCommands {
		if passes(e) {
			names = append(names, e.name)
		}
	}
	return names, true
}

// askRedis forwards COMMAND (a keyless request that reads no data: the
// first master answers it in a cluster) for the client, and answers p with
// rewrite(reply), or with Redis's reply itself when it is an error.
func (h *Handler) askRedis(c *protocol.Conn, args [][]byte, p *resp.Reply, rewrite func(reply, dst []byte) []byte) {
	// Redis's reply lands in a buffer of its own, read while p's grows.
	var redis *resp.Reply
	redis = resp.NewReplyFunc(func() {
		switch r := redis.Buf; {
		case redis.Err != nil:
			p.Err = redis.Err
		case len(r) == 0 || r[0] == '-' || r[0] == '!':
			p.Buf = append(p.Buf, r...)
		default:
			p.Buf = rewrite(r, p.Buf)
		}
		p.Done()
	})
	h.opts.Metrics.PassthroughCommands.Inc()
	h.opts.Backend.Forward(&sessionOf(c).backend, args, redis)
}

// withMore is a rewrite for askRedis that answers Redis's array with
// n more elements after its own, those add appends.
func withMore(n int, add func(dst []byte) []byte) func(reply, dst []byte) []byte {
	return func(reply, dst []byte) []byte {
		elems, ok := resp.Elements(reply)
		if !ok {
			return append(dst, reply...)
		}
		dst = redcon.AppendArray(dst, len(elems)+n)
		dst = append(dst, reply[len(reply)-sizeOf(elems):]...)
		return add(dst)
	}
}

// sizeOf is the bytes of elems together.
func sizeOf(elems [][]byte) int {
	n := 0
	for _, e := range elems {
		n += len(e)
	}
	return n
}

// mapBody reads a map reply, RESP3 or RESP2's flat array of pairs: how many
// pairs, and the bytes after the header.
func mapBody(reply []byte) (pairs int, body []byte, ok bool) {
	if len(reply) > 0 && reply[0] == '%' {
		// resp.Elements frames arrays: frame the map's 2n elements here.
		end := bytes.IndexByte(reply, '\n')
		n, ok := parseInt(bytes.TrimSuffix(reply[1:max(end, 1)], []byte("\r")))
		if end < 0 || !ok || n < 0 {
			return 0, nil, false
		}
		body = reply[end+1:]
		rest := body
		for range 2 * n {
			size, ok := resp.Size(rest)
			if !ok {
				return 0, nil, false
			}
			rest = rest[size:]
		}
		return int(n), body, len(rest) == 0
	}
	elems, ok := resp.Elements(reply)
	if !ok || len(elems)%2 != 0 {
		return 0, nil, false
	}
	return len(elems) / 2, reply[len(reply)-sizeOf(elems):], true
}

// appendSet and appendMap append an aggregate's header: RESP3's set and
// map, RESP2's array (a map's pairs flattened).
func appendSet(b []byte, n int, resp3 bool) []byte {
	if resp3 {
		return appendHeader(b, '~', n)
	}
	return appendHeader(b, '*', n)
}

func appendMap(b []byte, pairs int, resp3 bool) []byte {
	if resp3 {
		return appendHeader(b, '%', pairs)
	}
	return appendHeader(b, '*', 2*pairs)
}

func appendHeader(b []byte, kind byte, n int) []byte {
	b = strconv.AppendInt(append(b, kind), int64(n), 10)
	return append(b, '\r', '\n')
}

func appendStatus(b []byte, s string) []byte {
	return append(append(append(b, '+'), s...), '\r', '\n')
}

// appendInfo appends the command's COMMAND INFO entry.
func (e *command) appendInfo(b []byte, resp3 bool) []byte {
	b = redcon.AppendArray(b, 10)
	b = redcon.AppendBulkString(b, e.name)
	b = redcon.AppendInt(b, int64(e.arity))
	flags := e.commandFlags()
	b = appendSet(b, len(flags), resp3)
	for _, f := range flags {
		b = appendStatus(b, f)
	}
	key := int64(e.resource)
	step := int64(0)
	if key > 0 {
		step = 1
	}
	b = redcon.AppendInt(b, key)
	b = redcon.AppendInt(b, key)
	b = redcon.AppendInt(b, step)
	b = appendSet(b, len(e.categories), resp3)
	for _, cat := range e.categories {
		b = appendStatus(b, "@"+cat)
	}
	b = appendSet(b, 0, resp3) // tips
	if e.resource == 0 {
		b = appendSet(b, 0, resp3)
	} else {
		b = appendSet(b, 1, resp3)
		b = e.appendKeySpec(b, resp3)
	}
	return appendSet(b, 0, resp3) // subcommands
}

// commandFlags is the command's flags as COMMAND INFO names them, in
// Redis's order.
func (e *command) commandFlags() []string {
	var f []string
	if e.flags&flagWrite != 0 {
		f = append(f, "write")
	}
	if e.flags&flagReadonly != 0 {
		f = append(f, "readonly")
	}
	if e.flags&flagAdmin != 0 {
		f = append(f, "admin")
	}
	f = append(f, "noscript") // Redis, where scripts run, does not know it
	if e.flags&flagFast != 0 {
		f = append(f, "fast")
	}
	f = append(f, "no_multi") // queued in Redis, it would abort the transaction
	if e.flags&flagMovableKeys != 0 {
		f = append(f, "movablekeys")
	}
	return f
}

// appendKeySpec appends the key spec of the command's resource: one key
// at index resource, read (ACCESS), and written (UPDATE) by the commands
// that change its lease. The ACL checks the resource just so.
func (e *command) appendKeySpec(b []byte, resp3 bool) []byte {
	b = appendMap(b, 3, resp3)
	b = redcon.AppendBulkString(b, "flags")
	if e.flags&flagWritesResource != 0 {
		b = appendSet(b, 3, resp3)
		b = appendStatus(appendStatus(appendStatus(b, "RW"), "access"), "update")
	} else {
		b = appendSet(b, 2, resp3)
		b = appendStatus(appendStatus(b, "RO"), "access")
	}
	b = redcon.AppendBulkString(b, "begin_search")
	b = appendMap(b, 2, resp3)
	b = redcon.AppendBulkString(b, "type")
	b = redcon.AppendBulkString(b, "index")
	b = redcon.AppendBulkString(b, "spec")
	b = appendMap(b, 1, resp3)
	b = redcon.AppendBulkString(b, "index")
	b = redcon.AppendInt(b, int64(e.resource))
	b = redcon.AppendBulkString(b, "find_keys")
	b = appendMap(b, 2, resp3)
	b = redcon.AppendBulkString(b, "type")
	b = redcon.AppendBulkString(b, "range")
	b = redcon.AppendBulkString(b, "spec")
	b = appendMap(b, 3, resp3)
	b = redcon.AppendBulkString(b, "lastkey")
	b = redcon.AppendInt(b, 0)
	b = redcon.AppendBulkString(b, "keystep")
	b = redcon.AppendInt(b, 1)
	b = redcon.AppendBulkString(b, "limit")
	return redcon.AppendInt(b, 0)
}

// docsGroup is the COMMAND DOCS group of the proxy's own commands
// (redis-cli's "help @fenceproxy" lists them).
const docsGroup = "fenceproxy"

// appendDocs appends the command's COMMAND DOCS map: summary, group and
// arguments (no "since": the proxy's commands have no Redis version).
func (e *command) appendDocs(b []byte, resp3 bool) []byte {
	b = appendMap(b, 3, resp3)
	b = redcon.AppendBulkString(b, "summary")
	b = redcon.AppendBulkString(b, e.summary)
	b = redcon.AppendBulkString(b, "group")
	b = redcon.AppendBulkString(b, docsGroup)
	b = redcon.AppendBulkString(b, "arguments")
	return appendDocArgs(b, e.docs, resp3)
}

func appendDocArgs(b []byte, args []docArg, resp3 bool) []byte {
	b = redcon.AppendArray(b, len(args))
	for _, a := range args {
		n := 2
		if a.typ == "key" {
			n++
		}
		if a.token != "" {
			n++
		}
		var flags []string
		if a.optional {
			flags = append(flags, "optional")
		}
		if a.multiple {
			flags = append(flags, "multiple")
		}
		if len(flags) > 0 {
			n++
		}
		if a.oneof != nil {
			n++
		}
		b = appendMap(b, n, resp3)
		b = redcon.AppendBulkString(b, "name")
		b = redcon.AppendBulkString(b, a.name)
		b = redcon.AppendBulkString(b, "type")
		b = redcon.AppendBulkString(b, a.typ)
		if a.typ == "key" {
			b = redcon.AppendBulkString(b, "key_spec_index")
			b = redcon.AppendInt(b, 0)
		}
		if a.token != "" {
			b = redcon.AppendBulkString(b, "token")
			b = redcon.AppendBulkString(b, a.token)
		}
		if len(flags) > 0 {
			b = redcon.AppendBulkString(b, "flags")
			b = appendSet(b, len(flags), resp3)
			for _, f := range flags {
				b = appendStatus(b, f)
			}
		}
		if a.oneof != nil {
			b = redcon.AppendBulkString(b, "arguments")
			b = appendDocArgs(b, a.oneof, resp3)
		}
	}
	return b
}

// docArg is one argument in COMMAND DOCS (Redis's command-arguments
// model, the part the proxy's commands use).
type docArg struct {
	name, typ string // typ: key, string, integer, pure-token or oneof
	token     string // the keyword before it ("WAIT"), or a pure token's
	optional  bool
	multiple  bool
	oneof     []docArg
}

// docArgs reads a table entry's syntax, the words after the command's
// name as the README writes them: "resource owner ttl-ms [WAIT
// timeout-ms]", "resource token command [arg ...]", "GET|LEN|RESET|HELP
// [count]". An item is a name, a keyword and a name, a name followed by
// "..." (repeated), or keywords joined by "|" (one of them); "[...]" makes
// it optional. Names ending in "-ms", "token" and "count" are integers;
// the argument at index resource is the key; the rest are strings.
func docArgs(syntax string, resource int) []docArg {
	var args []docArg
	words := strings.Fields(syntax)
	for i := 0; i < len(words); i++ {
		item := []string{words[i]}
		optional := strings.HasPrefix(words[i], "[")
		if optional {
			for !strings.HasSuffix(item[len(item)-1], "]") {
				i++
				item = append(item, words[i])
			}
			item[0] = strings.TrimPrefix(item[0], "[")
			item[len(item)-1] = strings.TrimSuffix(item[len(item)-1], "]")
		}
		var a docArg
		switch {
		case len(item) == 2 && item[1] == "...":
			a = docArg{name: item[0], multiple: true}
		case len(item) == 2 && isKeyword(item[0]):
			a = docArg{name: item[1], token: item[0]}
		case len(item) == 1 && strings.Contains(item[0], "|"):
			a = docArg{name: "subcommand", typ: "oneof"}
			for _, k := range strings.Split(item[0], "|") {
				a.oneof = append(a.oneof, docArg{name: strings.ToLower(k), typ: "pure-token", token: k})
			}
		case len(item) == 1 && isKeyword(item[0]):
			a = docArg{name: strings.ToLower(item[0]), typ: "pure-token", token: item[0]}
		case len(item) == 1:
			a = docArg{name: item[0]}
		default:
			panic("commands: cannot read the syntax " + syntax)
		}
		a.optional = optional
		if a.typ == "" {
			switch {
			case len(args)+1 == resource:
				a.typ = "key"
			case strings.HasSuffix(a.name, "-ms"), a.name == "token", a.name == "count":
				a.typ = "integer"
			default:
				a.typ = "string"
			}
		}
		args = append(args, a)
	}
	return args
}

func isKeyword(w string) bool { return w != "" && strings.ToUpper(w) == w && strings.ToLower(w) != w }
