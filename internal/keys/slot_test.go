package keys

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// slotVectors are known CLUSTER KEYSLOT answers and hash tag cases.
var slotVectors = []struct {
	key  string
	same string // hashes like this key; "" when slot is given
	slot int
}{
	{key: "foo", slot: 12182},
	{key: "123456789", slot: 0x31C3 & (Slots - 1)}, // CRC-16/XMODEM check value 0x31C3
	{key: "", slot: 0},
	{key: "{user1000}.following", same: "user1000"},
	{key: "{user1000}.followers", same: "user1000"},
	{key: "foo{}{bar}", same: ""}, // empty tag: the whole key
	{key: "foo{{bar}}zap", same: "{bar"},
	{key: "foo{bar}{zap}", same: "bar"},
	{key: "{}", same: ""},
	{key: "{", same: ""},
	{key: "}{", same: ""},
	{key: "a{b", same: ""},
	{key: "a}b{c}", same: "c"},
}

func TestSlotOfVectors(t *testing.T) {
	for _, v := range slotVectors {
		want := v.slot
		switch {
		case v.same != "":
			want = SlotOf([]byte(v.same))
		case v.key != "" && v.key != "foo" && v.key != "123456789":
			want = int(crc16([]byte(v.key))) & (Slots - 1) // the whole key
		}
		if got := SlotOf([]byte(v.key)); got != want {
			t.Errorf("SlotOf(%q) = %d, want %d", v.key, got, want)
		}
	}
}

// slotKeys are the vectors plus random keys, many with braces.
func slotKeys() []string {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{}
	for _, v := range slotVectors {
		keys = append(keys, v.key)
	}
	const alphabet = "ab{}{}x\x00\xff"
	for range 2000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		keys = append(keys, string(b))
	}
	for i := range 200 {
		keys = append(keys, "key:"+strconv.Itoa(i), "{tag}"+strconv.Itoa(i))
	}
	return keys
}

// TestSlotOfMatchesRedis compares SlotOf with CLUSTER KEYSLOT of a real
// cluster-enabled redis-server.
func TestSlotOfMatchesRedis(t *testing.T) {
	c := startRedis(t)
	keys := slotKeys()
	for _, k := range keys {
		c.Send("CLUSTER", "KEYSLOT", k)
	}
	c.Flush()
	for _, k := range keys {
		reply, err := c.ReadReply()
		if err != nil {
			t.Fatal(err)
		}
		want, ok := testenv.ParseInt(reply)
		if !ok {
			t.Fatalf("CLUSTER KEYSLOT %q: %q", k, reply)
		}
		if got := SlotOf([]byte(k)); got != int(want) {
			t.Errorf("SlotOf(%q) = %d, CLUSTER KEYSLOT %d", k, got, want)
		}
	}
}

// TestSlotOfMatchesTestenv cross-checks the table-driven CRC with testenv's
// bitwise one.
func TestSlotOfMatchesTestenv(t *testing.T) {
	for _, k := range slotKeys() {
		if got, want := SlotOf([]byte(k)), testenv.KeySlot(k); got != want {
			t.Errorf("SlotOf(%q) = %d, testenv.KeySlot %d", k, got, want)
		}
	}
}

func TestSlotOfNoAlloc(t *testing.T) {
	key := []byte("{user1000}.following")
	if n := testing.AllocsPerRun(100, func() { SlotOf(key) }); n != 0 {
		t.Errorf("SlotOf allocates %v times", n)
	}
}

func BenchmarkSlotOf(b *testing.B) {
	for _, key := range []string{"foo", "{user1000}.following", "session:0123456789abcdef0123456789abcdef"} {
		k := []byte(key)
		b.Run(strconv.Itoa(len(k)), func(b *testing.B) {
			b.SetBytes(int64(len(k)))
			for b.Loop() {
				SlotOf(k)
			}
		})
	}
}
