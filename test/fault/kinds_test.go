package fault

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

var flagKinds = flag.String("fault.kinds", "", "comma-separated fault kinds to schedule (e.g. redis-partition); empty: all of them")

// selectedFaults is a fresh copy of the kinds -fault.kinds names, in
// AllFaults order, or of AllFaults. An unknown name panics: a typo must not
// quietly run a schedule without the fault it meant.
func selectedFaults() []FaultKind {
	if *flagKinds == "" {
		return slices.Clone(AllFaults)
	}
	var out []FaultKind
	for _, name := range strings.Split(*flagKinds, ",") {
		k := FaultKind(strings.TrimSpace(name))
		if !slices.Contains(AllFaults, k) {
			panic(fmt.Sprintf("-fault.kinds: unknown fault kind %q (known: %v)", k, AllFaults))
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b FaultKind) int { return slices.Index(AllFaults, a) - slices.Index(AllFaults, b) })
	return slices.Compact(out)
}
