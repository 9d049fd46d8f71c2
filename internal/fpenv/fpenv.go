// Package fpenv takes GO_FAILPOINTS out of the environment before
// github.com/pingcap/failpoint's init reads it, so that package failpoints
// can check the value with its own messages and arm it itself. pingcap's
// init arms whatever the variable holds and, on a spec it cannot read,
// panics in its parser or prints to standard output and exits 1, before
// any of this module's code runs.
//
// It imports nothing but os, so the spec's order of package initialization
// (packages sorted by import path, each as soon as what it imports is)
// initializes it before pingcap's package: everything it imports pingcap
// imports too, and "github.com/llmdst/…" sorts before
// "github.com/pingcap/…". Between its init and that of package failpoints,
// which puts the variable back, the variable is unset.
package fpenv

import "os"

// Name is the variable's name.
const Name = "GO_FAILPOINTS"

var (
	value string // the variable's value when the process started
	set   bool   // whether it was set, even to ""
)

func init() {
	value, set = os.LookupEnv(Name)
	if set {
		_ = os.Unsetenv(Name)
	}
}

// Taken returns GO_FAILPOINTS as the process started with it, and whether
// it was set. It stays out of the environment until the caller puts it
// back.
func Taken() (string, bool) { return value, set }
