//go:build race

package testenv

// raceEnabled reports whether the test binary was built with -race; if so,
// BuildProxy builds fenceproxy with -race too.
const raceEnabled = true
