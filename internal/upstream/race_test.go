//go:build race

package upstream

// raceEnabled: under the race detector sync.Pool drops items at random, so
// the flight a cluster request reuses is sometimes new: allocation counts
// are not checked.
const raceEnabled = true
