package cluster

import (
	"bytes"
	"math/rand/v2"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

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

// mergeSum adds integer replies.
func mergeSum(parts [][]byte, _ [][2]int, dst []byte) []byte {
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

// mergeKill answers SCRIPT KILL or FUNCTION KILL sent to every master: OK
// if one of them ended a script, else UNKILLABLE if one could not be
// ended, else the first master's reply (NOTBUSY: none was running).
func mergeKill(parts [][]byte, _ [][2]int, dst []byte) []byte {
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

// mergePubsub merges PUBSUB replies: NUMPAT summed, NUMSUB and SHARDNUMSUB
// summed per channel, CHANNELS and SHARDCHANNELS joined without repeats.
func mergePubsub(parts [][]byte, order [][2]int, dst []byte) []byte {
	if len(parts[0]) > 0 && parts[0][0] == ':' { // NUMPAT
		return mergeSum(parts, order, dst)
	}
	lists, bad := arrays(parts)
	if bad != nil {
		if parts[0][0] == '%' { // RESP3 NUMSUB is a map: the first master's
			return append(dst, parts[0]...)
		}
		return append(dst, bad...)
	}
	first := lists[0]
	if len(first) > 0 && len(first)%2 == 0 && first[1][0] == ':' { // NUMSUB: name, count, ...
		counts := make([]int64, len(first)/2)
		for _, l := range lists {
			if len(l) != len(first) {
				return append(dst, replyBadPart...)
			}
			for j := range counts {
				v, _ := resp.Parse(l[2*j+1])
				n, _ := v.(int64)
				counts[j] += n
			}
		}
		dst = redcon.AppendArray(dst, len(first))
		for j, n := range counts {
			dst = append(dst, first[2*j]...)
			dst = redcon.AppendInt(dst, n)
		}
		return dst
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
	return appendElements(dst, all)
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
	return appendElements(dst, all)
}

// appendElements appends an array of elements already in RESP.
func appendElements(dst []byte, elems [][]byte) []byte {
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
