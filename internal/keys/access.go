package keys

// What ACL checks need from COMMAND: each command's categories and how a
// request uses each of its keys. Both come from the same reply as the key
// positions, so a user's rules follow the backend's own classification.

// KeyRef is one key of a request and how the command uses it, from its key
// spec's flags as Redis's ACL reads them (acl.c, Redis 7.0): Read for
// ACCESS (the value is returned or used), Write for INSERT, DELETE or
// UPDATE. A key whose spec has neither (OBJECT ENCODING, EXISTS, TYPE)
// needs neither; Redis then lets any key pattern of the user allow it.
type KeyRef struct {
	Pos         int // index into args
	Read, Write bool
}

// Categories returns the command's ACL categories in lower case without
// the '@' ("read", "string", "fast"), as COMMAND lists them. The slice is
// the table's own: do not modify it.
func (c *Command) Categories() []string {
	if c == nil {
		return nil
	}
	return c.acl
}

// Subcommands returns the container's subcommands (OBJECT's, CONFIG's),
// nil for a command without any.
func (c *Command) Subcommands() []*Command {
	if c == nil || len(c.subs) == 0 {
		return nil
	}
	subs := make([]*Command, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	return subs
}

// KeyRefs appends to dst the request's keys with their access flags, spec
// by spec (not sorted; a key named by two specs appears twice). It finds
// the same keys as Keys, except the shard channels of not_key specs. A command that has to use the legacy triple has no
// flags to read, so its keys are marked both Read and Write: a user needs
// full access to them, the safe side. Like Keys it never panics and
// allocates nothing beyond growing dst.
func (c *Command) KeyRefs(dst []KeyRef, args [][]byte) []KeyRef {
	c = c.Sub(args)
	if c == nil {
		return dst
	}
	if c.legacy {
		if c.first <= 0 {
			return dst
		}
		last := c.last
		if last < 0 {
			last += len(args)
		}
		for i := c.first; i <= last && i < len(args); i += c.step {
			dst = append(dst, KeyRef{Pos: i, Read: true, Write: true})
		}
		return dst
	}
	start := len(dst)
	incomplete := false
	for i := range c.specs {
		s := &c.specs[i]
		if s.notKey {
			continue // shard channels: ACLs check them as channels
		}
		incomplete = incomplete || s.incomplete
		first, last, ok := s.span(args)
		if !ok {
			continue
		}
		for at := first; at <= last; at += s.keyStep {
			dst = append(dst, KeyRef{Pos: at, Read: s.read, Write: s.write})
		}
	}
	if incomplete && len(dst)-start > 1 {
		// As in Keys: an empty key beside others is a placeholder.
		kept := start
		for _, k := range dst[start:] {
			if len(args[k.Pos]) > 0 {
				dst[kept] = k
				kept++
			}
		}
		dst = dst[:kept]
	}
	return dst
}
