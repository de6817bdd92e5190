package fault

// RedisPartition cuts fenceproxy (and the Sentinels, which reach Redis the
// same way) off from the Redis master with a Link (a toxiproxy relay in
// front of each Redis): first both ways, healed, then one way (requests
// held, replies held, or replies dropped and the connections closed at
// heal), each phase shorter than Sentinel's down-after, so no failover
// follows. One Fault is recorded per phase; the Note names it.
const RedisPartition FaultKind = "redis-partition"

// kindsThatNeedRedis are the ops whose reply comes from Redis: a grant, a
// renewal, a release, a fenced write, and every ordinary command.
// FENCE.CHECK and LOCK.INFO may be answered by the proxy's own fence store.
var kindsThatNeedRedis = map[Kind]bool{Acquire: true, Renew: true, Release: true, Exec: true, Incr: true, Set: true, Get: true}

// redisPartition: while the proxy cannot reach the master (a phase of a
// redis-partition), no op that needs Redis's reply can succeed: none that
// started after the cut was in place and was answered before it healed is
// answered OK (a token, 1, a value). The proxy may answer -TRYAGAIN or an
// error meanwhile; which of those it says decides how the other checks
// count the op.
func (c *checker) redisPartition() {
	for _, f := range c.faults {
		if f.Kind != RedisPartition {
			continue
		}
		for _, op := range c.ops {
			if kindsThatNeedRedis[op.Kind] && op.Outcome == OK && op.Start > f.Start && op.End < f.End {
				c.fail("redis-partition", []*Op{op}, "answered OK while the proxy was cut off from Redis (%s)", f)
			}
		}
	}
}
