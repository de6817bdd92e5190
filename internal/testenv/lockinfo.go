package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// LockInfo is a LOCK.INFO reply, field by field.
type LockInfo struct {
	Owner    []byte // nil when free
	OwnerRaw string // the owner element as the proxy wrote it (a null's exact bytes)
	Token    int64
	TTL      int64 // ttl-ms
	Waiters  int64
	// Beyond the contract's four (absent: -1, -1, nil): acquired-at and
	// renewed-at (unix ms, -1 when free or unknown), client-addr (nil when
	// free or unknown).
	AcquiredAt, RenewedAt int64
	ClientAddr            []byte
	Raw                   string // the whole reply
}

// ParseLockInfo decodes LOCK.INFO's flat field/value array; every field of
// the contract must be there.
func ParseLockInfo(raw []byte) (LockInfo, error) {
	li := LockInfo{Raw: string(raw), AcquiredAt: -1, RenewedAt: -1}
	elems, ok := SplitArray(raw)
	if !ok || len(elems)%2 != 0 {
		return li, fmt.Errorf("reply %q is not a flat array of field/value pairs", raw)
	}
	seen := map[string]bool{}
	for i := 0; i < len(elems); i += 2 {
		name, ok := ParseBulk(elems[i])
		if !ok {
			return li, fmt.Errorf("reply %q: field name %q is not a bulk string", raw, elems[i])
		}
		v := elems[i+1]
		seen[string(name)] = true
		switch string(name) {
		case "owner":
			li.OwnerRaw = string(v)
			if IsNull(v) {
				break
			}
			if li.Owner, ok = ParseBulk(v); !ok {
				return li, fmt.Errorf("reply %q: owner %q is neither bulk nor null", raw, v)
			}
		case "client-addr":
			if IsNull(v) {
				break
			}
			if li.ClientAddr, ok = ParseBulk(v); !ok {
				return li, fmt.Errorf("reply %q: client-addr %q is neither bulk nor null", raw, v)
			}
		case "token", "ttl-ms", "waiters", "acquired-at", "renewed-at":
			n, ok := ParseInt(v)
			if !ok {
				return li, fmt.Errorf("reply %q: %s %q is not an integer", raw, name, v)
			}
			switch string(name) {
			case "token":
				li.Token = n
			case "ttl-ms":
				li.TTL = n
			case "acquired-at":
				li.AcquiredAt = n
			case "renewed-at":
				li.RenewedAt = n
			default:
				li.Waiters = n
			}
		}
	}
	for _, f := range []string{"owner", "token", "ttl-ms", "waiters"} {
		if !seen[f] {
			return li, fmt.Errorf("reply %q has no %q field", raw, f)
		}
	}
	return li, nil
}

// LockRecord is an owner record as fenceproxy keeps it in Redis (see
// internal/locks' scripts.go): its fields as stored, "" for one an older
// record lacks.
type LockRecord struct {
	Owner, Token, Term, Acquired, Renewed, Addr string
}

// ReadLockRecord reads the owner record at key straight from Redis through
// c: the string "token term acquired renewed addr-length addr owner", or
// a hash (owner, token, ...) as fenceproxy wrote records before. ok is
// false when there is no record; a key that is neither fails the test.
func ReadLockRecord(t testing.TB, c *Conn, key string) (rec LockRecord, ok bool) {
	t.Helper()
	switch typ := string(c.Do("TYPE", key)); typ {
	case "+none\r\n":
		return rec, false
	case "+hash\r\n":
		field := func(f string) string { v, _ := ParseBulk(c.Do("HGET", key, f)); return string(v) }
		rec = LockRecord{Owner: field("owner"), Token: field("token"), Term: field("term"),
			Acquired: field("acquired"), Renewed: field("renewed"), Addr: field("addr")}
		return rec, rec.Owner != ""
	case "+string\r\n":
		v, _ := ParseBulk(c.Do("GET", key))
		parts := strings.SplitN(string(v), " ", 6)
		if len(parts) == 6 {
			var n int
			if _, err := fmt.Sscan(parts[4], &n); err == nil && n >= 0 && n <= len(parts[5]) {
				return LockRecord{Token: parts[0], Term: parts[1], Acquired: parts[2], Renewed: parts[3],
					Addr: parts[5][:n], Owner: parts[5][n:]}, true
			}
		}
		t.Fatalf("%s holds %q: not an owner record", key, v)
	default:
		t.Fatalf("%s is of type %q: not an owner record", key, typ)
	}
	return rec, false
}
