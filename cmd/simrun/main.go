package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/schollz/progressbar/v3"
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// errFailed means the command ran and found a failure: exit code 1.
var errFailed = errors.New("failures found")

func main() {
	tuneGC(os.Getenv, os.DirFS("/"))
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "simrun: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := c.run(args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errFailed):
		return 1
	default: // bad usage, bad input, or a failure to write
		fmt.Fprintf(stderr, "simrun %s: %v\n", c.name, err)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: simrun COMMAND [flags]")
	fmt.Fprintln(w)
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "simrun COMMAND -h shows a command's flags.")
	fmt.Fprintln(w, "Exit codes: 0 all passed, 1 failures found, 2 bad usage or bad input.")
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// parseFlags parses a subcommand's flags; it turns errors and stray
// arguments into usage errors.
func parseFlags(fs *flag.FlagSet, args []string, positional int) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, &usageError{err.Error()}
	}
	rest := fs.Args()
	if len(rest) > positional {
		return nil, usagef("unexpected argument %q", rest[positional])
	}
	return rest, nil
}

// errHelp is -h: the flag package printed the help; exit 0.
var errHelp = errors.New("help")

// newBar is the progress bar of a long command on a terminal: count, rate
// and time left, in units of unit.
func newBar(w io.Writer, total int64, unit string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionShowCount(),
		progressbar.OptionShowIts(), progressbar.OptionSetItsString(unit), progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
}
