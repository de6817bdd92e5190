package resp

import (
	"crypto/sha1"
	"encoding/hex"
)

// ScriptSHA is the name Redis gives a script: the hex SHA-1 of its source,
// for EVALSHA and SCRIPT EXISTS.
func ScriptSHA(source string) string {
	sum := sha1.Sum([]byte(source))
	return hex.EncodeToString(sum[:])
}
