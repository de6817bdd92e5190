package locks

import (
	"strconv"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/keys"
)

// How FENCE.EXEC is checked where it lands (the contract's guarantee 7).
//
// The proxy judges a FENCE.EXEC's token against the fence store, but the
// write then travels to Redis, and may arrive late: held in the network, or
// sent by a process that was paused, killed or deposed right after its
// check. By then a newer token may have been granted, through this proxy
// after a restart or through a tier's next leader, and may have written.
// So the write itself carries the check, into the script that runs it
// (execScript), against state in Redis that a newer grant has already
// raised: the resource's fence mark.
//
// The mark is a string "token term" at markKey(resource), beside the owner
// record (same hash tag). Every new grant (opAcquire's, opHandoff's) raises
// it to its token and term in the same script call, and every FENCE.EXEC
// that runs raises it to its own; a FENCE.EXEC whose token is below the
// mark's, or whose term is below the mark's, is refused inside Redis and
// its command does not run (FENCESTALE, NEWERTERM). A delayed stale write
// is thus refused once a newer token has been granted, whether or not that
// token wrote anything.
//
// The mark cannot live for ever (a key per resource ever locked), so it
// expires Options.FenceMarkTTL (L) after it was last raised, and a write
// must land within L/2 of its check by Redis's own clock (TIME, in the
// script) or it is refused (FENCELATE). That is enough: a grant newer than
// the write's token was made after the write's check (the check found the
// token newest; in a tier, after a leadership round that began after
// checked-at, tier.Store's Newest), so its mark lives at least until
// checked-at + L, past the write's last moment of checked-at + L/2. The
// other half covers the clocks of the proxy and Redis disagreeing.
//
// In front of a Redis Cluster a script's keys must share one slot, and a
// FENCE.EXEC's command may write keys of another slot than the record's.
// Its mark is then its slot's own: markKeyIn, a key in that slot for that
// resource. Grants raise only the record's slot's mark, so a delayed stale
// write to another slot S is refused once a newer token has written to S
// through FENCE.EXEC, not merely once it was granted. Keys that carry the
// resource as their hash tag (balance:{resource}) are in the record's slot
// and get the full check. A command without keys uses the record's mark.
//
// Cost: one key per resource granted within the last L (about 100 bytes,
// docs/lock-family.md), and one GET and one SET more per grant in the script it
// already runs.

// defaultFenceMarkTTL is Options.FenceMarkTTL's default.
const defaultFenceMarkTTL = 24 * time.Hour

// markKey is the fence mark in the record's own slot (record key + ":fence").
func markKey(recordKey string) string { return recordKey + ":fence" }

// execMarkKey is the mark a FENCE.EXEC of resource checks and raises: the
// record's (recordKey's) unless, in front of a Redis Cluster, its first key
// is in another slot; then that slot's mark for resource.
func (m *Manager) execMarkKey(resource, recordKey, firstKey string) string {
	// Asked of the script runner, not configured: a Manager built without
	// saying (a test's) would have checked the record's mark, in another
	// slot than the command's keys: -CROSSSLOT for every such FENCE.EXEC.
	if firstKey == "" || !m.opts.Scripts.RoutesByKey() {
		return markKey(recordKey)
	}
	slot := keys.SlotOf([]byte(firstKey))
	if slot == keys.SlotOf([]byte(recordKey)) {
		return markKey(recordKey)
	}
	return markKeyIn(m.opts.KeyPrefix, slot, resource)
}

// markKeyIn is resource's fence mark in slot: prefix{tag}:fence:resource,
// with a tag that hashes to slot. (The prefix has no '{', as the record
// keys' hash tags need.)
func markKeyIn(prefix string, slot int, resource string) string {
	return prefix + "{" + slotTags()[slot] + "}:fence:" + resource
}

// slotTags holds, for each hash slot, a short string that hashes to it:
// the first base-36 number to do so. Made once, at the first FENCE.EXEC
// that needs one (about 170,000 CRC16s of a few bytes: milliseconds).
var slotTags = sync.OnceValue(func() *[keys.Slots]string {
	var tags [keys.Slots]string
	left := keys.Slots
	var buf [16]byte
	for n := int64(0); left > 0; n++ {
		b := strconv.AppendInt(buf[:0], n, 36)
		if slot := keys.SlotOf(b); tags[slot] == "" {
			tags[slot] = string(b)
			left--
		}
	}
	return &tags
})
