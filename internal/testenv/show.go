package testenv

import (
	"strconv"
	"strings"
)

// ShowCommand renders a command for failure messages: each argument quoted
// (binary bytes escaped), long ones cut.
func ShowCommand(args []string) string {
	parts := make([]string, len(args))
	for i, a := range args {
		if len(a) > 40 {
			parts[i] = strconv.Quote(a[:40]) + "…(" + strconv.Itoa(len(a)) + " bytes)"
		} else {
			parts[i] = strconv.Quote(a)
		}
	}
	return strings.Join(parts, " ")
}

// ShowReply quotes a raw reply for failure messages, shortened to something
// readable.
func ShowReply(b []byte) string {
	const max = 300
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "…(" + strconv.Itoa(len(b)) + " bytes)"
	}
	return strconv.Quote(string(b))
}
