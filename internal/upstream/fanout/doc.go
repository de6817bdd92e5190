// Package fanout is what a request becomes when one Redis Cluster master
// cannot answer it alone, and how the masters' replies become the one
// reply a single Redis holding every key would have given.
//
// Two tables say which requests: split.go's, for a request whose keys span
// slots (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH, and scripts known to treat
// each key alone, such as Redisson's batched lock renewal), which Cut turns
// into one request per slot; broadcast.go's, for a command about the whole
// keyspace (DBSIZE, KEYS, FLUSHALL, SCRIPT LOAD, PUBSUB, CONFIG SET,
// SLOWLOG, LATENCY, ...), which runs on every master. Anything else that
// spans slots is refused with Redis Cluster's own -CROSSSLOT. Each entry
// names its Merge (merge.go); MergeInfo merges INFO texts; Mirrored says
// which pub/sub names are heard from every master. RedirectOf says what a
// master's refusal means (MOVED, ASK: another master; TRYAGAIN,
// CLUSTERDOWN: again, once the cluster settles).
//
// The package does no I/O and keeps no state: package upstream sends the
// parts and hands their replies here (FanIn, Into). A merge never writes
// half a reply: a part whose reply is not what its command returns makes
// the whole reply an error, and a part that got none (its master
// unreachable) answers with that part's error.
package fanout
