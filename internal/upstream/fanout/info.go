package fanout

import (
	"strconv"
	"strings"
)

// infoSection is one "# Name" section of an INFO text: its fields in order.
type infoSection struct {
	name   string
	fields []string          // field names in order
	values map[string]string // field -> value
}

// parseInfoSections splits an INFO text into its sections, in order.
func parseInfoSections(text string) []*infoSection {
	var out []*infoSection
	var cur *infoSection
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if name, ok := strings.CutPrefix(line, "# "); ok {
			cur = &infoSection{name: name, values: map[string]string{}}
			out = append(out, cur)
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || cur == nil {
			continue
		}
		if _, dup := cur.values[k]; !dup {
			cur.fields = append(cur.fields, k)
		}
		cur.values[k] = v
	}
	return out
}

// statsLargest are the Stats fields that are a node's current or latest
// reading, not a count: the cluster's is the largest.
var statsLargest = map[string]bool{
	"latest_fork_usec": true, "current_eviction_exceeded_time": true, "current_active_defrag_time": true,
	// Subscriptions made through the proxy to keyspace channels are on
	// every master: summing would count each as many times. So are a
	// tracking client's BCAST prefixes (package upstream/tracking).
	"pubsub_channels": true, "pubsub_patterns": true, "tracking_total_prefixes": true,
	// A tracking client has a connection of its own on each master it
	// read from (every master, with BCAST): the largest count is the
	// nearest to the number of tracking clients (summing counts one client
	// once per master).
	"tracking_clients": true,
}

// clientsSummed are the Clients fields that count clients of the proxy: a
// client blocked through the proxy is so on one master, on a connection of
// its own. tracking_clients is the largest (statsLargest). The rest of the
// section is the first master's.
var clientsSummed = map[string]bool{"blocked_clients": true, "tracking_clients": true, "clients_in_timeout_table": true}

// statsAverage are the Stats fields that are a proportion.
var statsAverage = map[string]bool{"expired_stale_perc": true}

// MergeInfo merges the masters' INFO texts into one node's (package upstream's Info says how).
func MergeInfo(texts []string) string {
	all := make([]map[string]*infoSection, len(texts))
	for i, t := range texts {
		all[i] = map[string]*infoSection{}
		for _, s := range parseInfoSections(t) {
			all[i][strings.ToLower(s.name)] = s
		}
	}
	var b strings.Builder
	for i, first := range parseInfoSections(texts[0]) {
		if i > 0 {
			b.WriteString("\r\n")
		}
		others := make([]*infoSection, 0, len(texts))
		for _, m := range all {
			if s := m[strings.ToLower(first.name)]; s != nil {
				others = append(others, s)
			}
		}
		merged := first
		switch strings.ToLower(first.name) {
		case "stats":
			merged = mergeFields(others, mergeStat)
		case "keyspace":
			merged = mergeFields(others, mergeKeyspace)
		case "commandstats", "errorstats":
			merged = mergeFields(others, mergeCounts)
		case "clients":
			merged = mergeFields(others, func(field string, values []string) string {
				if clientsSummed[field] {
					return mergeStat(field, values)
				}
				return values[0]
			})
		}
		b.WriteString("# " + first.name + "\r\n")
		for _, f := range merged.fields {
			b.WriteString(f + ":" + merged.values[f] + "\r\n")
		}
	}
	return b.String()
}

// mergeFields merges one section of every master: the union of their
// fields (the first master's order, then fields only others have), each
// field's values merged by merge.
func mergeFields(secs []*infoSection, merge func(field string, values []string) string) *infoSection {
	out := &infoSection{name: secs[0].name, values: map[string]string{}}
	for _, s := range secs {
		for _, f := range s.fields {
			if _, seen := out.values[f]; seen {
				continue
			}
			var vals []string
			for _, o := range secs {
				if v, ok := o.values[f]; ok {
					vals = append(vals, v)
				}
			}
			out.fields = append(out.fields, f)
			out.values[f] = merge(f, vals)
		}
	}
	return out
}

// mergeStat merges one Stats field: summed, or the largest or the average
// (statsLargest, statsAverage); a value that is not a number is the first.
func mergeStat(field string, values []string) string {
	nums := make([]float64, len(values))
	isInt := true
	for i, v := range values {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return values[0]
		}
		nums[i] = n
		isInt = isInt && !strings.ContainsAny(v, ".eE")
	}
	var r float64
	switch {
	case statsLargest[field]:
		for _, n := range nums {
			r = max(r, n)
		}
	default:
		for _, n := range nums {
			r += n
		}
		if statsAverage[field] {
			r /= float64(len(nums))
		}
	}
	if isInt {
		return strconv.FormatInt(int64(r), 10)
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// kvList parses "a=1,b=2" into its keys in order and values.
func kvList(v string) (keys []string, vals map[string]string) {
	vals = map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
		vals[k] = val
	}
	return keys, vals
}

// mergeCounts merges a Commandstats or Errorstats line
// (calls=..,usec=..,usec_per_call=..,...; count=..): every count summed,
// usec_per_call recomputed from the sums; a command run on every master
// for each call (everyMaster) is the line of the master that counted most.
func mergeCounts(field string, values []string) string {
	if everyMaster[strings.TrimPrefix(field, "cmdstat_")] {
		most, mostCalls := values[0], int64(-1)
		for _, v := range values {
			_, vals := kvList(v)
			if n, _ := strconv.ParseInt(vals["calls"], 10, 64); n > mostCalls {
				most, mostCalls = v, n
			}
		}
		return most
	}
	keys, _ := kvList(values[0])
	sums := map[string]int64{}
	for _, v := range values {
		_, vals := kvList(v)
		for k, val := range vals {
			n, _ := strconv.ParseInt(val, 10, 64)
			sums[k] += n
		}
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		if k == "usec_per_call" {
			per := 0.0
			if sums["calls"] > 0 {
				per = float64(sums["usec"]) / float64(sums["calls"])
			}
			parts[i] = k + "=" + strconv.FormatFloat(per, 'f', 2, 64)
			continue
		}
		parts[i] = k + "=" + strconv.FormatInt(sums[k], 10)
	}
	return strings.Join(parts, ",")
}

// mergeKeyspace merges a Keyspace line (keys=..,expires=..,avg_ttl=..):
// keys and expires summed, avg_ttl weighted by each master's expires.
func mergeKeyspace(_ string, values []string) string {
	keys, _ := kvList(values[0])
	sums := map[string]int64{}
	var ttlWeighted float64
	for _, v := range values {
		_, vals := kvList(v)
		for k, val := range vals {
			n, _ := strconv.ParseInt(val, 10, 64)
			sums[k] += n
		}
		exp, _ := strconv.ParseInt(vals["expires"], 10, 64)
		ttl, _ := strconv.ParseInt(vals["avg_ttl"], 10, 64)
		ttlWeighted += float64(exp) * float64(ttl)
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		n := sums[k]
		if k == "avg_ttl" {
			n = 0
			if sums["expires"] > 0 {
				n = int64(ttlWeighted / float64(sums["expires"]))
			}
		}
		parts[i] = k + "=" + strconv.FormatInt(n, 10)
	}
	return strings.Join(parts, ",")
}
