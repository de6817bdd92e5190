package fault

import (
	"fmt"
	"strings"
	"sync"
)

// startClients starts -fault.clients lock clients and the data clients,
// each counted in workers until stop is closed.
func (e *env) startClients(stop <-chan struct{}, workers *sync.WaitGroup) {
	for i := range *flagClients {
		workers.Add(1)
		go func() { defer workers.Done(); e.lockClient(i, stop) }()
	}
	for k, rc := range Recipes {
		if len(e.recipeRes[rc]) == 0 {
			continue // not in this mode
		}
		for i := range recipeClients {
			id := 600 + 50*k + i
			workers.Add(1)
			go func() { defer workers.Done(); e.recipeClient(id, rc, stop) }()
		}
	}
	for i := range dataClients {
		workers.Add(1)
		go func() { defer workers.Done(); e.dataClient(500+i, stop) }()
	}
}

// judge fails the test with the run's line, how to replay it, the fault
// schedule and the first violations, if the checker reported any; and if
// nothing was granted at all, since then the workload did not run.
func (e *env) judge(line, replay string, rep Report) {
	t := e.t
	if len(rep.Violations) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%s\nreplay: %s\nfault schedule:\n", line, replay)
		for _, f := range e.h.sortedFaults() {
			fmt.Fprintf(&b, "\t%s\n", f)
		}
		fmt.Fprintf(&b, "violations by check: %s\n", rep.ByCheck())
		for i, v := range rep.Violations {
			if i == 20 {
				fmt.Fprintf(&b, "... and %d more violations (see the history file)\n", len(rep.Violations)-20)
				break
			}
			fmt.Fprintf(&b, "%s\n", v)
		}
		t.Error(b.String())
	}
	if rep.Grants == 0 {
		t.Errorf("no lock was granted in the whole run: the workload did not run")
	}
}
