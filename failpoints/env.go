package failpoints

import (
	"fmt"
	"os"
	"strings"

	"github.com/llmdst/llmdst/internal/fpenv"
)

// envSpec is one spec of GO_FAILPOINTS.
type envSpec struct {
	name, terms string
	p           *Point // nil: another package's failpoint, not this module's
}

// readEnv reads a GO_FAILPOINTS value, NAME=TERMS specs separated by ";".
// A name under this module's path must be in the catalogue, as a
// -failpoint's must, and a catalogue failpoint's values are checked as
// Enable checks them; another package's failpoints are pingcap's to read.
func readEnv(env string) ([]envSpec, error) {
	var specs []envSpec
	for _, fp := range strings.Split(env, ";") {
		if strings.TrimSpace(fp) == "" {
			continue
		}
		name, terms, ok := strings.Cut(fp, "=")
		name, terms = strings.TrimSpace(name), strings.TrimSpace(terms)
		if !ok || name == "" {
			return nil, fmt.Errorf("failpoints: GO_FAILPOINTS: %q: want NAME=TERMS, specs separated by \";\", as in %s=return(500)", fp, CoreStallBeforeAbort.FullName())
		}
		p, err := lookup(name)
		if err != nil {
			if strings.HasPrefix(name, fullPrefix) {
				return nil, fmt.Errorf("failpoints: GO_FAILPOINTS: %w", err)
			}
			specs = append(specs, envSpec{name: name, terms: terms})
			continue
		}
		if err := p.checkValues(readPingcap(terms)); err != nil {
			return nil, fmt.Errorf("failpoints: GO_FAILPOINTS: %w", err)
		}
		specs = append(specs, envSpec{name: name, terms: terms, p: p})
	}
	return specs, nil
}

// EnvSpecs returns the catalogue's failpoints that GO_FAILPOINTS arms, as
// "name=terms" specs, so that a simulated run can arm the same ones in a
// set of its own (where a term that would break replay is refused). This
// package armed them in the process-wide set at start. It refuses a name
// under this module's path that is not in the catalogue, and a value that
// a failpoint cannot take.
func EnvSpecs() ([]string, error) {
	env, err := readEnv(os.Getenv(fpenv.Name))
	if err != nil {
		return nil, err
	}
	var specs []string
	for _, s := range env {
		if s.p != nil {
			specs = append(specs, s.p.Name+"="+s.terms)
		}
	}
	return specs, nil
}

// armEnv arms GO_FAILPOINTS's specs in pingcap's registry, as pingcap's
// init would have: the catalogue's with Enable, which marks them armed in
// the process-wide set too, and another package's as written, so that its
// failpoints still work.
func armEnv(env string) error {
	specs, err := readEnv(env)
	if err != nil {
		return err
	}
	for _, s := range specs {
		if s.p == nil {
			// Only pingcap's parser reads another package's terms: it
			// arms each as it reads it.
			if err := enablePingcap(s.name, s.terms); err != nil {
				return fmt.Errorf("failpoints: GO_FAILPOINTS: %s: %w", s.name, err)
			}
			continue
		}
		if err := enable(s.p, s.terms); err != nil {
			return fmt.Errorf("failpoints: GO_FAILPOINTS: %w", err)
		}
	}
	return nil
}

func init() {
	// fpenv took GO_FAILPOINTS out of the environment before pingcap's
	// init could read it: pingcap panics on some values, exits 1 (a found
	// failure, to simrun's callers) on others, and says so on standard
	// output. Put it back first, for EnvSpecs and the processes this one
	// starts; then arm it, or stop as for any bad input: exit 2.
	env, ok := fpenv.Taken()
	if !ok {
		return
	}
	_ = os.Setenv(fpenv.Name, env)
	if err := armEnv(env); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
