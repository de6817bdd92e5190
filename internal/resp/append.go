package resp

import "github.com/tidwall/redcon"

// AppendCommand appends args as a RESP multibulk request, the form Redis
// reads requests in.
func AppendCommand(b []byte, args [][]byte) []byte {
	b = redcon.AppendArray(b, len(args))
	for _, a := range args {
		b = redcon.AppendBulk(b, a)
	}
	return b
}
