package rttest

import (
	"flag"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// FailTB is a rapid.TB that records a property's failure instead of
// failing the test, for a test that expects the property to fail: under
// the legacy engine, or with a planted bug armed. Run it with
// CheckCatching.
type FailTB struct {
	*testing.T
	// As is the name rapid sees, which names its fail files; "" means the
	// test's own and "/legacy".
	As     string
	Msgs   []string // what the property said as it failed
	failed bool
}

func (f *FailTB) Name() string {
	if f.As != "" {
		return f.As
	}
	return f.T.Name() + "/legacy"
}
func (f *FailTB) Errorf(format string, a ...any) {
	f.failed = true
	f.Msgs = append(f.Msgs, fmt.Sprintf(format, a...))
}
func (f *FailTB) Error(a ...any)                 { f.failed = true; f.Msgs = append(f.Msgs, fmt.Sprint(a...)) }
func (f *FailTB) Fatalf(format string, a ...any) { f.Errorf(format, a...); panic(f) }
func (f *FailTB) Fatal(a ...any)                 { f.Error(a...); panic(f) }
func (f *FailTB) Fail()                          { f.failed = true }
func (f *FailTB) FailNow()                       { f.failed = true; panic(f) }
func (f *FailTB) Failed() bool                   { return f.failed }
func (f *FailTB) Logf(string, ...any)            {}
func (f *FailTB) Log(...any)                     {}
func (f *FailTB) Helper()                        {}

// CheckCatching runs rapid.Check on tb, which ends a failure by panicking
// with itself.
func CheckCatching(tb *FailTB, prop func(*rapid.T)) {
	defer func() {
		if r := recover(); r != nil && r != tb {
			panic(r)
		}
	}()
	rapid.Check(tb, prop)
}

// SetFlag sets a command-line flag, rapid's (rapid.checks, rapid.seed,
// rapid.nofailfile…), for the rest of the test.
func SetFlag(t *testing.T, name, value string) {
	f := flag.Lookup(name)
	require.NotNil(t, f, "no flag %s", name)
	old := f.Value.String()
	require.NoError(t, flag.Set(name, value))
	t.Cleanup(func() { _ = flag.Set(name, old) })
}
