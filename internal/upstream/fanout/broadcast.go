package fanout

import "github.com/fenceproxy/fenceproxy/internal/keys"

// Keyless commands about the whole keyspace, in front of a Redis Cluster:
// they run on every master and the replies merge into what one node
// holding every key would answer (merge.go). (SCAN walks the masters one
// after another instead: package upstream.)

// Renumber gives a SLOWLOG GET entry of the master at part (among the
// parts, in order) the id the proxy shows for it: each master numbers its
// own entries from 0.
type Renumber func(part int, id, when int64) int64

// broadcastRule names a command (or some of its subcommands) that runs on
// every master, and how the replies merge.
type broadcastRule struct {
	command string   // lower case
	sub     []string // the subcommands that broadcast; nil: the command itself
	merge   Merge
	// mergeArgs, if set, makes the merge from the request's arguments
	// and the masters' ids for their entries (SLOWLOG GET's count and
	// ids) instead of merge.
	mergeArgs func(args [][]byte, renumber Renumber) Merge
}

var broadcastTable = []broadcastRule{
	{command: "dbsize", merge: MergeSum},
	{command: "keys", merge: mergeConcat},
	{command: "flushall", merge: mergeOK},
	{command: "flushdb", merge: mergeOK},
	// SCRIPT EXISTS is 1 only where every master has the script, so that a
	// client that sees 1 can EVALSHA whatever the slot.
	{command: "script", sub: []string{"load", "flush", "exists"}, merge: mergeScript},
	// FUNCTION LIST and DUMP are the first master's: every master holds
	// what was loaded through the proxy.
	{command: "function", sub: []string{"load", "delete", "flush", "restore"}, merge: mergeOK},
	{command: "function", sub: []string{"stats"}, merge: mergeFunctionStats},
	// RANDOMKEY: one master's key, the master picked at random, so a
	// cluster whose first master is empty still answers a key.
	{command: "randomkey", merge: mergeRandom},
	// PUBSUB: each node knows only its own subscribers (and a shard
	// channel lives on its slot's master), so ask them all.
	{command: "pubsub", sub: []string{"channels", "shardchannels", "numsub", "shardnumsub", "numpat"}, merge: mergePubsub},
	// CONFIG SET (and RESETSTAT, REWRITE) on every master, which keeps
	// them alike: CONFIG GET is then the first master's answer. A setting
	// made through the proxy is also made on a master that joins later
	// (package upstream, configs.go).
	{command: "config", sub: []string{"set", "resetstat", "rewrite"}, merge: mergeOK},
	// LATENCY and SLOWLOG: each master measures its own commands.
	{command: "latency", sub: []string{"latest"}, merge: mergeLatencyLatest},
	{command: "latency", sub: []string{"history"}, merge: mergeLatencyHistory},
	{command: "latency", sub: []string{"histogram"}, merge: mergeLatencyHistogram},
	{command: "latency", sub: []string{"reset"}, merge: mergeLargest},
	{command: "slowlog", sub: []string{"get"}, mergeArgs: slowlogMerge},
	{command: "slowlog", sub: []string{"len"}, merge: MergeSum},
	{command: "slowlog", sub: []string{"reset"}, merge: mergeOK},
	// DEBUG's switches of server behaviour (tests set them): every master.
	{command: "debug", sub: []string{"set-active-expire", "quicklist-packed-threshold", "set-skip-checksum-validation", "reload", "pause-cron"}, merge: mergeOK},
}

// broadcasts is broadcastTable by command, then subcommand ("" for a
// command that broadcasts whole).
var broadcasts = map[string]map[string]*broadcastRule{}

func init() {
	for i := range broadcastTable {
		r := &broadcastTable[i]
		if broadcasts[r.command] == nil {
			broadcasts[r.command] = map[string]*broadcastRule{}
		}
		if r.sub == nil {
			broadcasts[r.command][""] = r
		}
		for _, s := range r.sub {
			broadcasts[r.command][s] = r
		}
	}
}

// Broadcast is how a request that runs on every master merges their
// replies, or nil if it goes to one master. renumber gives the masters'
// SLOWLOG ids, asked only for SLOWLOG GET.
func Broadcast(args [][]byte, renumber func() Renumber) Merge {
	r := broadcastRuleOf(broadcasts[keys.LowerName(args[0])], args)
	switch {
	case r == nil:
		return nil
	case r.mergeArgs != nil:
		return r.mergeArgs(args, renumber())
	}
	return r.merge
}

// Broadcasts reports whether a request (name: lower case) runs on every
// master.
func Broadcasts(name []byte, args [][]byte) bool {
	return broadcastRuleOf(broadcasts[string(name)], args) != nil
}

// broadcastRuleOf returns the rule of a request that broadcasts, nil if it
// does not (subs: its command's rules, nil if none).
func broadcastRuleOf(subs map[string]*broadcastRule, args [][]byte) *broadcastRule {
	r := subs[""]
	if r == nil && len(args) > 1 {
		r = subs[keys.LowerName(args[1])]
	}
	return r
}
