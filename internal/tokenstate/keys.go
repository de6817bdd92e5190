package tokenstate

import "encoding/binary"

// The m/ keys (see the package doc for which store writes which).
var (
	BoundKey = []byte("m/bound")
	FloorKey = []byte("m/floor")

	IDKey  = []byte("m/id")
	RunKey = []byte("m/run")
	DirKey = []byte("m/dir")

	AppliedKey = []byte("m/applied")
	TierKey    = []byte("m/tier")
	LeaderKey  = []byte("m/leader")
)

// The per-resource families.
var (
	TokenPrefix    = []byte("t/")
	ReservedPrefix = []byte("p/")
)

// MaxResourceLen is the longest resource a store accepts, in bytes.
const MaxResourceLen = 512

// TokenKey is t/<resource>: the resource's newest token.
func TokenKey[R ~string | ~[]byte](resource R) []byte {
	k := make([]byte, 0, len(TokenPrefix)+len(resource))
	return append(append(k, TokenPrefix...), resource...)
}

// ReservedKey is "p/", the token (8 bytes, big-endian), then the resource.
func ReservedKey[R ~string | ~[]byte](resource R, token uint64) []byte {
	k := make([]byte, 0, len(ReservedPrefix)+8+len(resource))
	k = append(k, ReservedPrefix...)
	k = binary.BigEndian.AppendUint64(k, token)
	return append(k, resource...)
}

// ParseReservedKey splits a p/ key into its token and resource (which
// aliases k); ok is false for a key too short to hold a token. The
// resource may be empty: whether that is corrupt is the store's call.
func ParseReservedKey(k []byte) (token uint64, resource []byte, ok bool) {
	if len(k) < len(ReservedPrefix)+8 {
		return 0, nil, false
	}
	k = k[len(ReservedPrefix):]
	return binary.BigEndian.Uint64(k), k[8:], true
}

// PrefixUpper is the first key after every key that starts with prefix
// (an iterator's UpperBound; every prefix here ends below 0xff).
func PrefixUpper(prefix []byte) []byte {
	u := append([]byte(nil), prefix...)
	u[len(u)-1]++
	return u
}
