package keys

import (
	"strconv"
	"sync"
)

// Slots is the number of hash slots of Redis Cluster.
const Slots = 16384

// SlotOf is the Redis Cluster hash slot of key, as CLUSTER KEYSLOT computes
// it: CRC16 (XMODEM) mod 16384 of the key or, when the key has a hash tag,
// of the tag. The tag is the part between the first '{' and the first '}'
// after it, and only when that part is not empty: "{user}.a" hashes "user",
// "foo{}{bar}" hashes the whole key, "foo{{bar}}" hashes "{bar".
func SlotOf(key []byte) int {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				break
			}
		}
		break
	}
	return int(crc16(key)) & (Slots - 1)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), a byte at a
// time through crc16Table.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^c]
	}
	return crc
}

// crc16Table[i] is the CRC of the byte i shifted through the polynomial.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// TagForSlot returns a short hash tag, "{" + tag + "}", whose slot is slot:
// for keys the proxy writes on a given master of its own accord.
func TagForSlot(slot int) string {
	tagsOnce.Do(func() {
		left := Slots
		for i := 0; left > 0; i++ {
			tag := strconv.Itoa(i)
			if s := SlotOf([]byte(tag)); slotTags[s] == "" {
				slotTags[s] = "{" + tag + "}"
				left--
			}
		}
	})
	return slotTags[slot&(Slots-1)]
}

var (
	tagsOnce sync.Once
	slotTags [Slots]string
)
