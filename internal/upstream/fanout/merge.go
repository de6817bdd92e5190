package fanout

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Merge combines the replies of a request's parts (in the order of the
// parts) into one reply, appended to dst; order maps each element of a
// merged array to its part and its index there (a split request's; nil
// for a broadcast).
type Merge func(parts [][]byte, order [][2]int, dst []byte) []byte

// The merges of split.go's and broadcast.go's tables: each turns the
// replies of a request's parts (in part order) into the one reply a node
// holding every key would have given. A part answered with an error
// (Redis's own) answers the whole request; a part whose reply is not what
// the command returns yields replyBadPart, never a half-written reply.

// replyBadPart answers a split request when a master's reply to its part
// is not what that command returns.
const replyBadPart = "-ERR fenceproxy: unexpected reply from a Redis Cluster master to part of a request\r\n"

// firstError returns the first part's reply that is an error, if any.
func firstError(parts [][]byte) []byte {
	for _, r := range parts {
		if len(r) > 0 && r[0] == '-' {
			return r
		}
	}
	return nil
}

// arrays splits every part's array reply into its elements. If a part is
// an error (Redis's own) or not an array, reply is what the client gets
// instead.
func arrays(parts [][]byte) (lists [][][]byte, reply []byte) {
	if e := firstError(parts); e != nil {
		return nil, e
	}
	lists = make([][][]byte, len(parts))
	for i, r := range parts {
		var ok bool
		if lists[i], ok = resp.Elements(r); !ok {
			return nil, []byte(replyBadPart)
		}
	}
	return lists, nil
}

// mergeArrays rebuilds one array, each element taken from its part.
func mergeArrays(parts [][]byte, order [][2]int, dst []byte) []byte {
	lists, bad := arrays(parts)
	if bad != nil {
		return append(dst, bad...)
	}
	for _, o := range order {
		if o[1] >= len(lists[o[0]]) {
			return append(dst, replyBadPart...)
		}
	}
	dst = redcon.AppendArray(dst, len(order))
	for _, o := range order {
		dst = append(dst, lists[o[0]][o[1]]...)
	}
	return dst
}

// MergeSum adds integer replies.
func MergeSum(parts [][]byte, _ [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	var sum int64
	for _, r := range parts {
		v, err := resp.Parse(r)
		n, ok := v.(int64)
		if err != nil || !ok {
			return append(dst, replyBadPart...)
		}
		sum += n
	}
	return redcon.AppendInt(dst, sum)
}

// mergeOK answers the first error, or the first reply (+OK) if none.
func mergeOK(parts [][]byte, _ [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	return append(dst, parts[0]...)
}

// MergeKill answers SCRIPT KILL or FUNCTION KILL sent to every master: OK
// if one of them ended a script, else UNKILLABLE if one could not be
// ended, else the first master's reply (NOTBUSY: none was running).
func MergeKill(parts [][]byte, _ [][2]int, dst []byte) []byte {
	for _, want := range []string{"+OK\r\n", "-UNKILLABLE"} {
		for _, r := range parts {
			if bytes.HasPrefix(r, []byte(want)) {
				return append(dst, r...)
			}
		}
	}
	return append(dst, parts[0]...)
}

// mergeRandom answers one non-null reply, starting the search at a random
// master.
func mergeRandom(parts [][]byte, _ [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	at := rand.IntN(len(parts))
	for i := range parts {
		r := parts[(at+i)%len(parts)]
		if r[0] == '$' && r[1] != '-' {
			return append(dst, r...)
		}
	}
	return append(dst, parts[0]...) // all empty: Redis's own null
}

// mergePubsub merges PUBSUB replies: NUMSUB and SHARDNUMSUB summed per
// channel, CHANNELS and SHARDCHANNELS joined without repeats. A keyspace
// channel (mirrored, see keyspace.go) has the same subscribers on every
// master, so its NUMSUB is the largest count, not the sum; NUMPAT is the
// largest count too, since the proxy's clients' patterns are all on one
// master (their home), and patterns that may match a keyspace channel on
// every master as well.
func mergePubsub(parts [][]byte, order [][2]int, dst []byte) []byte {
	if len(parts[0]) > 0 && parts[0][0] == ':' { // NUMPAT
		return mergeLargest(parts, order, dst)
	}
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	lists := make([][][]byte, len(parts))
	asMap := false
	for i, r := range parts {
		var ok, isMap bool
		if lists[i], isMap, ok = resp.FlatElements(r); !ok {
			return append(dst, replyBadPart...)
		}
		asMap = asMap || isMap
	}
	first := lists[0]
	if asMap || len(first) > 0 && len(first)%2 == 0 && first[1][0] == ':' { // NUMSUB: name, count, ...
		counts := make([]int64, len(first)/2)
		for _, l := range lists {
			if len(l) != len(first) {
				return append(dst, replyBadPart...)
			}
			for j := range counts {
				n, _ := resp.Integer(l[2*j+1])
				name, _ := resp.BulkString(l[2*j])
				if Mirrored([]byte(name)) {
					counts[j] = max(counts[j], n)
				} else {
					counts[j] += n
				}
			}
		}
		pairs := make([][]byte, 0, len(first))
		for j, n := range counts {
			pairs = append(pairs, first[2*j], redcon.AppendInt(nil, n))
		}
		return appendPairs(dst, pairs, asMap)
	}
	seen := map[string]bool{} // CHANNELS: the union
	var all [][]byte
	for _, l := range lists {
		for _, e := range l {
			if !seen[string(e)] {
				seen[string(e)] = true
				all = append(all, e)
			}
		}
	}
	return AppendElements(dst, all)
}

// mergeConcat joins arrays (KEYS).
func mergeConcat(parts [][]byte, _ [][2]int, dst []byte) []byte {
	lists, bad := arrays(parts)
	if bad != nil {
		return append(dst, bad...)
	}
	var all [][]byte
	for _, l := range lists {
		all = append(all, l...)
	}
	return AppendElements(dst, all)
}

// AppendElements appends an array of elements already in RESP.
func AppendElements(dst []byte, elems [][]byte) []byte {
	dst = redcon.AppendArray(dst, len(elems))
	for _, e := range elems {
		dst = append(dst, e...)
	}
	return dst
}

// mergeScript: SCRIPT EXISTS is the element-wise minimum (1 only if every
// master has the script); SCRIPT LOAD and FLUSH the first error, else the
// first reply.
func mergeScript(parts [][]byte, order [][2]int, dst []byte) []byte {
	if len(parts[0]) > 0 && parts[0][0] != '*' { // LOAD or FLUSH
		return mergeOK(parts, order, dst)
	}
	lists, bad := arrays(parts)
	if bad != nil {
		return append(dst, bad...)
	}
	dst = redcon.AppendArray(dst, len(lists[0]))
	for i := range lists[0] {
		all := true
		for _, l := range lists {
			all = all && i < len(l) && string(l[i]) == ":1\r\n"
		}
		if all {
			dst = redcon.AppendInt(dst, 1)
		} else {
			dst = redcon.AppendInt(dst, 0)
		}
	}
	return dst
}

// appendPairs appends key, value, ... as a RESP3 map if asMap, else as a
// flat array (RESP2's form of a map).
func appendPairs(dst []byte, pairs [][]byte, asMap bool) []byte {
	if asMap {
		dst = append(dst, '%')
		dst = strconv.AppendInt(dst, int64(len(pairs)/2), 10)
		dst = append(dst, "\r\n"...)
	} else {
		dst = redcon.AppendArray(dst, len(pairs))
	}
	for _, e := range pairs {
		dst = append(dst, e...)
	}
	return dst
}

// mergeLargest answers the largest integer (LATENCY RESET: the events
// reset, most of which every master has).
func mergeLargest(parts [][]byte, _ [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	var most int64
	for _, r := range parts {
		n, ok := resp.Integer(r)
		if !ok {
			return append(dst, replyBadPart...)
		}
		most = max(most, n)
	}
	return redcon.AppendInt(dst, most)
}

// mergeFunctionStats answers FUNCTION STATS: the master's whose
// running_script is not null (a function busy there), else the first's.
func mergeFunctionStats(parts [][]byte, order [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	for _, r := range parts {
		elems, _, ok := resp.FlatElements(r)
		if !ok || len(elems) < 2 {
			return append(dst, replyBadPart...)
		}
		if v := elems[1]; !bytes.Equal(v, []byte("$-1\r\n")) && !bytes.Equal(v, []byte("_\r\n")) {
			return append(dst, r...)
		}
	}
	return append(dst, parts[0]...)
}

// mergeLatencyLatest merges LATENCY LATEST: one entry per event (event,
// timestamp, latest, max) in the first master's order, then the events
// only others have: the most recent timestamp and its latency, the
// largest max.
func mergeLatencyLatest(parts [][]byte, _ [][2]int, dst []byte) []byte {
	lists, bad := arrays(parts)
	if bad != nil {
		return append(dst, bad...)
	}
	type event struct {
		name               []byte
		when, latest, most int64
	}
	var events []*event
	byName := map[string]*event{}
	for _, l := range lists {
		for _, raw := range l {
			f, ok := resp.Elements(raw)
			if !ok || len(f) != 4 {
				return append(dst, replyBadPart...)
			}
			when, ok1 := resp.Integer(f[1])
			latest, ok2 := resp.Integer(f[2])
			most, ok3 := resp.Integer(f[3])
			if !ok1 || !ok2 || !ok3 {
				return append(dst, replyBadPart...)
			}
			e := byName[string(f[0])]
			if e == nil {
				e = &event{name: f[0]}
				byName[string(f[0])] = e
				events = append(events, e)
			}
			if when >= e.when {
				e.when, e.latest = when, latest
			}
			e.most = max(e.most, most)
		}
	}
	dst = redcon.AppendArray(dst, len(events))
	for _, e := range events {
		dst = redcon.AppendArray(dst, 4)
		dst = append(dst, e.name...)
		dst = redcon.AppendInt(dst, e.when)
		dst = redcon.AppendInt(dst, e.latest)
		dst = redcon.AppendInt(dst, e.most)
	}
	return dst
}

// mergeLatencyHistory merges LATENCY HISTORY event: every master's
// (timestamp, latency) samples, oldest first.
func mergeLatencyHistory(parts [][]byte, _ [][2]int, dst []byte) []byte {
	lists, bad := arrays(parts)
	if bad != nil {
		return append(dst, bad...)
	}
	type sample struct {
		when int64
		raw  []byte
	}
	var all []sample
	for _, l := range lists {
		for _, raw := range l {
			f, ok := resp.Elements(raw)
			if !ok || len(f) != 2 {
				return append(dst, replyBadPart...)
			}
			when, _ := resp.Integer(f[0])
			all = append(all, sample{when, raw})
		}
	}
	slices.SortStableFunc(all, func(a, b sample) int { return cmp.Compare(a.when, b.when) })
	dst = redcon.AppendArray(dst, len(all))
	for _, s := range all {
		dst = append(dst, s.raw...)
	}
	return dst
}

// mergeLatencyHistogram merges LATENCY HISTOGRAM: per command, calls
// summed and the cumulative counts per bucket added up (a master without a
// bucket counts what it has at its largest bucket below).
func mergeLatencyHistogram(parts [][]byte, _ [][2]int, dst []byte) []byte {
	if e := firstError(parts); e != nil {
		return append(dst, e...)
	}
	type hist struct {
		name    []byte
		calls   int64
		buckets []map[int64]int64 // per master: bucket -> cumulative count
		most    int               // the master with the most calls (everyMaster)
		counts  []int64           // calls per master
	}
	var cmds []*hist
	byName := map[string]*hist{}
	asMap := false
	for _, r := range parts {
		elems, isMap, ok := resp.FlatElements(r)
		if !ok || len(elems)%2 != 0 {
			return append(dst, replyBadPart...)
		}
		asMap = asMap || isMap
		for i := 0; i < len(elems); i += 2 {
			h := byName[string(elems[i])]
			if h == nil {
				h = &hist{name: elems[i]}
				byName[string(elems[i])] = h
				cmds = append(cmds, h)
			}
			fields, _, ok := resp.FlatElements(elems[i+1])
			if !ok || len(fields)%2 != 0 {
				return append(dst, replyBadPart...)
			}
			for j := 0; j < len(fields); j += 2 {
				name, _ := resp.BulkString(fields[j])
				switch name {
				case "calls":
					n, _ := resp.Integer(fields[j+1])
					h.calls += n
					if len(h.counts) > 0 && n > h.counts[h.most] {
						h.most = len(h.counts)
					}
					h.counts = append(h.counts, n)
				case "histogram_usec":
					bs, _, ok := resp.FlatElements(fields[j+1])
					if !ok || len(bs)%2 != 0 {
						return append(dst, replyBadPart...)
					}
					m := map[int64]int64{}
					for k := 0; k < len(bs); k += 2 {
						b, _ := resp.Integer(bs[k])
						n, _ := resp.Integer(bs[k+1])
						m[b] = n
					}
					h.buckets = append(h.buckets, m)
				}
			}
		}
	}
	var out [][]byte
	for _, h := range cmds {
		if name, _ := resp.BulkString(h.name); everyMaster[name] && h.most < len(h.buckets) {
			// One call of the client's ran on every master: the
			// master that counted most stands for all.
			h.calls, h.buckets = h.counts[h.most], h.buckets[h.most:h.most+1]
		}
		bucketSet := map[int64]bool{}
		for _, ms := range h.buckets {
			for b := range ms {
				bucketSet[b] = true
			}
		}
		bounds := make([]int64, 0, len(bucketSet))
		for b := range bucketSet {
			bounds = append(bounds, b)
		}
		slices.Sort(bounds)
		var hb [][]byte
		for _, b := range bounds {
			var sum int64
			for _, ms := range h.buckets {
				var at, n int64 = -1, 0
				for mb, c := range ms {
					if mb <= b && mb > at {
						at, n = mb, c
					}
				}
				sum += n
			}
			hb = append(hb, redcon.AppendInt(nil, b), redcon.AppendInt(nil, sum))
		}
		var inner [][]byte
		inner = append(inner, redcon.AppendBulkString(nil, "calls"), redcon.AppendInt(nil, h.calls))
		inner = append(inner, redcon.AppendBulkString(nil, "histogram_usec"), appendPairs(nil, hb, asMap))
		out = append(out, h.name, appendPairs(nil, inner, asMap))
	}
	return appendPairs(dst, out, asMap)
}

// everyMaster are the commands (Redis's names: "config|set") that the
// proxy runs on every master for one request of a client (broadcast.go's
// table, WAIT): the counts of calls of LATENCY HISTOGRAM and INFO's
// Commandstats are the largest of one master's, not their sum, which would
// count each call once per master.
var everyMaster = map[string]bool{"wait": true, "waitaof": true}

func init() {
	for _, r := range broadcastTable {
		if r.command == "debug" {
			continue // some of its subcommands only, and one name for all
		}
		if r.sub == nil {
			everyMaster[r.command] = true
		}
		for _, sub := range r.sub {
			everyMaster[r.command+"|"+sub] = true
		}
	}
	delete(everyMaster, "randomkey") // one master answers it
}

// slowlogMerge merges SLOWLOG GET [count]: every master's entries, the
// most recent first (by timestamp, then id), at most count of them (10 by
// default, all for a negative count, as Redis). renumber, if not nil, gives
// each entry returned the proxy's id for it (part: the master's place among
// the parts; upstream's slowlog.go), oldest first.
func slowlogMerge(args [][]byte, renumber Renumber) Merge {
	count := int64(10)
	if len(args) > 2 {
		if n, ok := resp.ParseInt(args[2]); ok {
			count = n
		}
	}
	return func(parts [][]byte, _ [][2]int, dst []byte) []byte {
		lists, bad := arrays(parts)
		if bad != nil {
			return append(dst, bad...)
		}
		type entry struct {
			part      int
			id, when  int64
			raw, rest []byte // rest: the entry after its id
		}
		var all []entry
		for part, l := range lists {
			for _, raw := range l {
				f, ok := resp.Elements(raw)
				if !ok || len(f) < 2 {
					return append(dst, replyBadPart...)
				}
				id, _ := resp.Integer(f[0])
				when, _ := resp.Integer(f[1])
				at := bytes.IndexByte(raw, '\n') + 1 + len(f[0])
				all = append(all, entry{part, id, when, raw, raw[at:]})
			}
		}
		slices.SortStableFunc(all, func(a, b entry) int {
			if c := cmp.Compare(b.when, a.when); c != 0 {
				return c
			}
			return cmp.Compare(b.id, a.id)
		})
		if count >= 0 && int64(len(all)) > count {
			all = all[:count]
		}
		ids := make([]int64, len(all))
		for i := len(all) - 1; i >= 0; i-- {
			ids[i] = all[i].id
			if renumber != nil {
				ids[i] = renumber(all[i].part, all[i].id, all[i].when)
			}
		}
		dst = redcon.AppendArray(dst, len(all))
		for i, e := range all {
			if renumber == nil {
				dst = append(dst, e.raw...)
				continue
			}
			dst = append(dst, e.raw[:bytes.IndexByte(e.raw, '\n')+1]...)
			dst = redcon.AppendInt(dst, ids[i])
			dst = append(dst, e.rest...)
		}
		return dst
	}
}
