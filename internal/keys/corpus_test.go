package keys

import "strings"

// request is one request of the corpus the tests compare with COMMAND
// GETKEYS, and the fuzz target's seeds.
type request struct {
	line string // arguments separated by single spaces; "" alone is an empty argument
	// want, when not nil, overrides what COMMAND GETKEYS says: the key names
	// Keys must return (empty for none), with why the difference is accepted.
	want []string
	why  string
}

// args splits a request line into arguments; the token "" is an empty argument.
func (r request) args() [][]byte {
	var args [][]byte
	for _, f := range strings.Split(r.line, " ") {
		if f == `""` {
			f = ""
		}
		args = append(args, []byte(f))
	}
	return args
}

var none = []string{}

// corpus covers every key spec shape of Redis 7.0: index and keyword begin
// searches (forwards and backwards), ranges with and without a limit, key
// counts, container commands, the legacy triple, commands without keys, and
// malformed requests.
var corpus = []request{
	// index + range 0
	{line: "GET k"},
	{line: "get K"},
	{line: "GET", want: none, why: "GETKEYS rejects the arity; there is no key"},
	{line: "SET k v"},
	{line: "SET k v EX 10 NX GET"},
	{line: "SET k v KEEPTTL XX"},
	{line: "GETEX k PERSIST"},
	{line: "GETDEL k"},
	{line: "INCR k"},
	{line: "APPEND k v"},
	{line: "STRLEN k"},
	{line: "SETRANGE k 0 v"},
	{line: "GETRANGE k 0 1"},
	{line: "EXPIRE k 10"},
	{line: "EXPIRETIME k"},
	{line: "TYPE k"},
	{line: "DUMP k"},
	{line: "RESTORE k 0 payload REPLACE"},
	{line: "MOVE k 1"},
	{line: "HSET h f v f2 v2"},
	{line: "HGETALL h"},
	{line: "HRANDFIELD h 1"},
	{line: "LPUSH l a b"},
	{line: "SRANDMEMBER s 2"},
	{line: "ZADD z 1 m"},
	{line: "ZRANGE z 0 -1"},
	{line: "GEOADD g 1 2 m"},
	{line: "PFADD hll a b"},
	{line: "BITCOUNT k"},
	{line: "BITFIELD k GET u8 0 SET u8 0 1"},
	{line: "BITFIELD_RO k GET u8 0"},
	{line: "LCS a b"},
	// two fixed keys
	{line: "RENAME a b"},
	{line: "RENAMENX a b"},
	{line: "COPY a b"},
	{line: "COPY a b DB 1 REPLACE"},
	{line: "RPOPLPUSH src dst"},
	{line: "LMOVE src dst LEFT RIGHT"},
	{line: "BLMOVE src dst LEFT RIGHT 0"},
	{line: "BRPOPLPUSH src dst 0"},
	{line: "SMOVE src dst m"},
	{line: "ZRANGESTORE dst src 0 1"},
	{line: "GEOSEARCHSTORE dst src FROMMEMBER m BYRADIUS 1 m"},
	{line: "GEOSEARCH src FROMMEMBER m BYRADIUS 1 m"},
	// ranges to the end, with steps
	{line: "MSET k1 v1 k2 v2 k3 v3"},
	{line: "MSET k1 v1 k2"},
	{line: "MSETNX k1 v1 k2 v2"},
	{line: "MGET k1 k2 k3"},
	{line: "DEL k1 k2 k3"},
	{line: "UNLINK k1 k2"},
	{line: "EXISTS k1 k2"},
	{line: "TOUCH a b"},
	{line: "WATCH a b"},
	{line: "PFCOUNT h1 h2"},
	{line: "PFMERGE dst a b"},
	{line: "PFMERGE dst", want: []string{"dst"}, why: "GETKEYS drops every key when one spec (the empty source range) does not fit; PFMERGE dst alone is valid and writes dst"},
	{line: "SINTER a b"},
	{line: "SUNIONSTORE dst a b"},
	{line: "BITOP AND dst a b"},
	{line: "BITOP NOT dst a"},
	// ranges up to a trailing timeout
	{line: "BLPOP l1 l2 l3 0"},
	{line: "BRPOP l1 0"},
	{line: "BZPOPMIN z1 z2 0"},
	// keynum
	{line: "EVAL s 0", want: none, why: "GETKEYS errors when there are no keys"},
	{line: "EVAL s 1 k1"},
	{line: "EVAL s 2 k1 k2 a1"},
	{line: "EVAL s 3 k1 k2 k3"},
	{line: "EVAL s 3 k1 k2", want: none, why: "numkeys beyond the arguments: GETKEYS errors, EVAL rejects it"},
	{line: "EVAL s -1 k1", want: none, why: "negative numkeys"},
	{line: "EVAL s abc k1", want: none, why: "numkeys not a number"},
	{line: "EVAL s 99999999999999999999 k1", want: none, why: "numkeys overflows"},
	{line: "EVAL s 01 k1", want: none, why: "Redis's fallback reads numkeys with atoi; the spec (and EVAL itself) require a canonical integer"},
	{line: "EVAL s", want: none, why: "no numkeys at all"},
	{line: "EVALSHA sha 2 k1 k2"},
	{line: "EVAL_RO s 1 k1 a"},
	{line: "EVALSHA_RO sha 1 k1"},
	{line: "FCALL f 0", want: none, why: "GETKEYS errors when there are no keys"},
	{line: "FCALL f 2 k1 k2 a"},
	{line: "FCALL_RO f 1 k1"},
	{line: "ZUNIONSTORE dst 2 a b"},
	{line: "ZUNIONSTORE dst 2 a b WEIGHTS 1 2"},
	{line: "ZINTERSTORE dst 1 a"},
	{line: "ZDIFFSTORE dst 2 a b"},
	{line: "ZUNIONSTORE dst 5 a b", want: []string{"dst"}, why: "a bad count drops only its own spec; GETKEYS drops every key, ZUNIONSTORE rejects it"},
	{line: "ZUNION 2 a b"},
	{line: "ZINTER 2 a b WITHSCORES"},
	{line: "ZDIFF 1 a"},
	{line: "ZINTERCARD 2 a b LIMIT 1"},
	{line: "SINTERCARD 2 a b"},
	{line: "SINTERCARD 3 a b c LIMIT 0"},
	{line: "SINTERCARD 5 a b", want: none, why: "numkeys beyond the arguments"},
	{line: "LMPOP 2 a b LEFT COUNT 1"},
	{line: "LMPOP 1 a RIGHT"},
	{line: "LMPOP 0 a LEFT", want: none, why: "zero numkeys"},
	{line: "LMPOP -1 a LEFT", want: none, why: "negative numkeys"},
	{line: "BLMPOP 0 2 a b LEFT"},
	{line: "ZMPOP 2 a b MIN"},
	{line: "BZMPOP 0 1 a MAX COUNT 2"},
	// keyword begin search, forwards, with a limit
	{line: "XREAD COUNT 1 BLOCK 0 STREAMS a b 0 0"},
	{line: "XREAD STREAMS a 0"},
	{line: "xread streams a b c 0 0 0"},
	{line: "XREAD STREAMS a b 0"}, // odd count: XREAD rejects it; the spec's limit gives the first half
	{line: "XREAD COUNT 1", want: none, why: "no STREAMS keyword"},
	{line: "XREAD COUNT STREAMS", want: none, why: "STREAMS is the last argument"},
	{line: "XREADGROUP GROUP g c STREAMS a >"},
	{line: "XREADGROUP GROUP g c COUNT 2 STREAMS a b > >"},
	{line: "XREADGROUP GROUP g c STREAMS", want: none, why: "nothing after STREAMS"},
	{line: "XADD s * f v"},
	{line: "XADD s MAXLEN ~ 10 * f v"},
	{line: "XRANGE s - +"},
	// keyword begin search, optional keys
	{line: "GEORADIUS g 1 2 3 m"},
	{line: "GEORADIUS g 1 2 3 m STORE dst"},
	{line: "GEORADIUS g 1 2 3 m STOREDIST dst"},
	{line: "GEORADIUS g 1 2 3 m STORE dst STOREDIST dst2"},
	{line: "GEORADIUS g 1 2 3 m STOREDIST dst2 STORE dst"},
	{line: "GEORADIUSBYMEMBER g m 3 km STORE dst"},
	{line: "GEORADIUS_RO g 1 2 3 m"},
	// keyword begin search backwards (incomplete spec)
	{line: "MIGRATE h 1 k 0 5000"},
	{line: `MIGRATE h 1 "" 0 5000 KEYS a b`},
	{line: `MIGRATE h 1 "" 0 5000 COPY REPLACE KEYS a b`},
	{line: `MIGRATE h 1 "" 0 5000 AUTH pw KEYS a`},
	// unknown specs: the legacy triple
	{line: "SORT k"},
	{line: "SORT k BY w GET o"},
	{line: "SORT k STORE dst", want: []string{"k"}, why: "STORE's spec is unknown; the node answers CROSSSLOT if dst is elsewhere"},
	{line: "SORT k BY w GET o LIMIT 0 10 STORE dst", want: []string{"k"}, why: "as above"},
	{line: "SORT_RO k BY w GET o"},
	// containers
	{line: "OBJECT ENCODING k"},
	{line: "object encoding k"},
	{line: "ObJeCt FrEq k"},
	{line: "OBJECT HELP", want: none, why: "no keys"},
	{line: "OBJECT", want: none, why: "no subcommand"},
	{line: "OBJECT NOSUCH k", want: none, why: "unknown subcommand"},
	{line: "MEMORY USAGE k"},
	{line: "MEMORY USAGE k SAMPLES 5"},
	{line: "MEMORY STATS", want: none, why: "no keys"},
	{line: "XINFO STREAM s"},
	{line: "XINFO STREAM s FULL"},
	{line: "XINFO GROUPS s"},
	{line: "XINFO CONSUMERS s g"},
	{line: "XINFO HELP", want: none, why: "no keys"},
	{line: "XINFO", want: none, why: "no subcommand"},
	{line: "XGROUP CREATE s g $"},
	{line: "XGROUP CREATECONSUMER s g c"},
	{line: "CLIENT LIST", want: none, why: "no keys"},
	{line: "CLIENT SETNAME n", want: none, why: "no keys"},
	{line: "CLIENT KILL ID 1", want: none, why: "no keys"},
	{line: "CONFIG GET maxmemory", want: none, why: "no keys"},
	{line: "CONFIG SET x y", want: none, why: "no keys"},
	// shard channels: keys flagged not_key
	{line: "SPUBLISH ch msg", want: []string{"ch"}, why: "not_key: GETKEYS omits shard channels, the proxy routes them by slot"},
	{line: "SSUBSCRIBE c1 c2", want: []string{"c1", "c2"}, why: "as above"},
	{line: "SUNSUBSCRIBE c1", want: []string{"c1"}, why: "as above"},
	// no keys
	{line: "PUBLISH ch msg", want: none, why: "no keys"},
	{line: "SUBSCRIBE c1", want: none, why: "no keys"},
	{line: "PING", want: none, why: "no keys"},
	{line: "PING hello", want: none, why: "no keys"},
	{line: "ECHO x", want: none, why: "no keys"},
	{line: "WAIT 1 0", want: none, why: "no keys"},
	{line: "INFO", want: none, why: "no keys"},
	{line: "DBSIZE", want: none, why: "no keys"},
	{line: "SCAN 0", want: none, why: "no keys"},
	{line: "KEYS *", want: none, why: "a pattern, not a key"},
	{line: "RANDOMKEY", want: none, why: "no keys"},
	{line: "NOSUCHCOMMAND a b", want: none, why: "unknown command"},
}
