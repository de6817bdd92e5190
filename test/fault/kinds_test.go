package fault

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

var flagKinds = flag.String("fault.kinds", "", "comma-separated fault kinds to schedule (e.g. redis-partition); empty: all of them")

// selectedFaults is a fresh copy of the kinds of all that -fault.kinds
// names, in all's order, or of all. A name all does not hold panics: a
// typo must not quietly run a schedule without the fault it meant.
func selectedFaults(all []FaultKind) []FaultKind {
	if *flagKinds == "" {
		return slices.Clone(all)
	}
	var out []FaultKind
	for _, name := range strings.Split(*flagKinds, ",") {
		k := FaultKind(strings.TrimSpace(name))
		if !slices.Contains(all, k) {
			panic(fmt.Sprintf("-fault.kinds: fault kind %q is not one of this suite's (%v)", k, all))
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b FaultKind) int { return slices.Index(all, a) - slices.Index(all, b) })
	return slices.Compact(out)
}
