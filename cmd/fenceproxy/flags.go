package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// errVersion: --version was given and the version printed; exit 0.
var errVersion = errors.New("version printed")

// usageError is a command line the flag package could not parse: main
// prints it as one line and a hint to --help, not the whole usage (over a
// hundred lines that buried the one that said what was wrong).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// parseArgs parses args into fs. -help prints the usage to stderr as the
// flag package does and returns flag.ErrHelp; any other error is a
// usageError that says what was wrong and what was expected.
func parseArgs(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stderr)
		fmt.Fprintln(os.Stderr, "Usage of fenceproxy:")
		fs.PrintDefaults()
		return err
	}
	return usageError{explainFlagError(fs, err)}
}

// badValue matches the flag package's error for a value that does not
// parse: `invalid value "500" for flag -replica-timeout: parse error`
// (`invalid boolean value ...` for a boolean).
var badValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): `)

// explainFlagError turns the flag package's error into one line naming
// the flag with two dashes, as the README writes them, and the expected
// form of its value.
func explainFlagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Sprintf("unknown flag --%s", strings.TrimPrefix(name, "-"))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value", strings.TrimPrefix(name, "-"))
	}
	m := badValue.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, name := m[1], m[2]
	f := fs.Lookup(name)
	if f == nil {
		return msg
	}
	getter, _ := f.Value.(flag.Getter)
	if getter == nil {
		return fmt.Sprintf("--%s: %s", name, msg)
	}
	switch getter.Get().(type) {
	case time.Duration:
		if _, err := strconv.ParseFloat(value, 64); err == nil {
			return fmt.Sprintf("--%s: %s needs a unit: %sms, %ss or %sm (a duration: 500ms, 2s, 1m30s)", name, value, value, value, value)
		}
		return fmt.Sprintf("--%s: %q is not a duration: want a number with a unit, such as 500ms, 2s or 1m30s", name, value)
	case int, int64:
		return fmt.Sprintf("--%s: %q is not an integer", name, value)
	case uint, uint64:
		return fmt.Sprintf("--%s: %q is not a whole number 0 or more", name, value)
	case float64:
		return fmt.Sprintf("--%s: %q is not a number", name, value)
	case bool:
		return fmt.Sprintf("--%s: %q is not true or false (--%s alone means true)", name, value, name)
	}
	// A flag of its own type: its error says what it wants.
	_, why, _ := strings.Cut(msg[len(m[0])-2:], ": ")
	return fmt.Sprintf("--%s: %q: %s", name, value, why)
}

// versionLine is what --version prints: the module's version (a tag when
// built with go install ...@version, "(devel)" from a checkout), the
// commit it was built from and whether the tree had changes, and Go's
// version.
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "fenceproxy (no build information)"
	}
	line := "fenceproxy " + info.Main.Version
	var rev, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		line += fmt.Sprintf(" (commit %s, %s%s)", rev, at, modified)
	}
	return line + " " + info.GoVersion
}
