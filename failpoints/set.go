package failpoints

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pingcap/failpoint"

	"github.com/llmdst/llmdst/task"
)

// Chooser answers a run set's probability draws: n ≥ 1, answer in [0, n).
// The simulator's choosers satisfy it.
type Chooser interface {
	Intn(n int) int
}

// Set is a set of armed failpoints that an engine evaluates. The nil *Set
// is the process-wide set: pingcap's registry, armed with Enable, Scoped or
// GO_FAILPOINTS. A Set from NewSet is scoped to one run and deterministic.
type Set struct {
	armed  atomic.Bool
	global bool       // the process-wide set: evaluated through pingcap's registry
	mu     sync.Mutex // evaluations may come from several goroutines on the real runtime
	terms  map[*Point]*chain
	draw   Chooser
	specs  []string
}

// NewSet arms a run-scoped set with "name=terms" specs; draw answers the
// ratio probabilities and should come from the run's seed (stream
// sim.StreamFaults). It refuses unknown names and terms that would break
// replay.
func NewSet(draw Chooser, specs ...string) (*Set, error) {
	s := &Set{terms: map[*Point]*chain{}, draw: draw}
	for _, spec := range specs {
		p, c, err := ParseSpec(spec)
		if err != nil {
			return nil, err
		}
		if _, dup := s.terms[p]; dup {
			return nil, fmt.Errorf("failpoints: %s is armed twice", p.Name)
		}
		s.terms[p] = c
		s.specs = append(s.specs, p.Name+"="+c.desc)
	}
	s.armed.Store(len(s.terms) > 0)
	return s, nil
}

// ParseSpec reads "name=terms", with the short or the full name.
func ParseSpec(spec string) (*Point, *chain, error) {
	name, terms, ok := strings.Cut(spec, "=")
	if !ok {
		return nil, nil, fmt.Errorf("failpoints: %q: want NAME=TERMS, as in core/stall-before-abort=return(500)", spec)
	}
	p, err := Lookup(strings.TrimSpace(name))
	if err != nil {
		return nil, nil, err
	}
	c, err := parseChain(strings.TrimSpace(terms))
	if err != nil {
		return nil, nil, fmt.Errorf("failpoints: %s: %w", p.Name, err)
	}
	if err := p.checkValues(c.terms); err != nil {
		return nil, nil, fmt.Errorf("failpoints: %w", err)
	}
	return p, c, nil
}

// Specs returns the set's specs as NewSet read them, short names, in order.
func (s *Set) Specs() []string {
	if s == nil {
		return nil
	}
	return s.specs
}

// process is the process-wide set; it is armed while any of its points is.
var (
	process      = &Set{global: true}
	processMu    sync.Mutex // orders arm's count and flag
	processArmed int        // points armed in the process-wide set
)

// Fires reports whether p fires now. A disarmed failpoint costs one atomic
// load: Fires and Stall are inlined at the call site (Value, which the core
// calls once a step, is a call).
func (s *Set) Fires(p *Point) (fired bool) {
	if s == nil {
		s = process
	}
	if s.armed.Load() {
		fired = s.fires(p)
	}
	return fired
}

// fires is kept out of line so that Fires inlines.
//
//go:noinline
func (s *Set) fires(p *Point) bool {
	_, ok := s.eval(p)
	return ok
}

// Armed reports whether p is armed in the set: it may fire. A nil Set is
// the process-wide one.
func (s *Set) Armed(p *Point) bool {
	if s == nil || s.global {
		return p.armed.Load()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.terms[p]
	return ok
}

// Value reports whether p fires now, and its value.
func (s *Set) Value(p *Point) (string, bool) {
	if s == nil {
		s = process
	}
	if !s.armed.Load() {
		return "", false
	}
	return s.eval(p)
}

// Stall sleeps for p's delay on rt's clock when p fires.
func (s *Set) Stall(rt task.Runtime, p *Point) {
	if s == nil {
		s = process
	}
	if s.armed.Load() {
		s.stall(rt, p)
	}
}

// stall is kept out of line so that Stall inlines: PGO, seeing it hot in
// runs with a stall armed, would otherwise inline it into Stall and make
// Stall too big to inline, a call at every disarmed site.
//
//go:noinline
func (s *Set) stall(rt task.Runtime, p *Point) {
	if v, ok := s.eval(p); ok {
		rt.Sleep(Delay(v))
	}
}

// Delay reads a delay value: microseconds, or a Go duration; empty means
// 1ms. A value it cannot read is 1ms too: arming a delay failpoint
// refuses such a value, so only a value that was never armed gets here.
func Delay(v string) time.Duration {
	d, err := parseDelay(v)
	if err != nil {
		return time.Millisecond
	}
	return d
}

func (s *Set) eval(p *Point) (string, bool) {
	if s.global {
		if !p.armed.Load() {
			return "", false
		}
		v, err := failpoint.Eval(p.FullName())
		if err != nil || v == nil { // pingcap's off evaluates to a nil value
			return "", false
		}
		switch v := v.(type) {
		case string:
			return v, true
		case struct{}:
			return "", true
		}
		return fmt.Sprint(v), true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.terms[p]
	if !ok {
		return "", false
	}
	return c.eval(p.Name, s.draw.Intn)
}

// Enable arms p in the process-wide set, with pingcap's full grammar.
func Enable(name, terms string) error {
	p, err := Lookup(name)
	if err != nil {
		return err
	}
	if err := enable(p, terms); err != nil {
		return fmt.Errorf("failpoints: %w", err)
	}
	return nil
}

// enable is Enable for a failpoint of the catalogue, its error without the
// package's name.
func enable(p *Point, terms string) error {
	if err := p.checkValues(readPingcap(terms)); err != nil {
		return err
	}
	if err := enablePingcap(p.FullName(), terms); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	arm(p, true)
	return nil
}

// enablePingcap arms name in pingcap's registry. pingcap's parser panics
// on some values it cannot read (return(abc) slices past its input); such
// a panic is an error like the others it returns.
func enablePingcap(name, terms string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pingcap's failpoint cannot read %q: %v", terms, r)
		}
	}()
	if err := failpoint.Enable(name, terms); err != nil {
		// pingcap's error names the failpoint ("error on NAME: "), which
		// the caller's says already.
		return errors.New(strings.TrimPrefix(err.Error(), "error on "+name+": "))
	}
	return nil
}

// arm marks p armed or not in the process-wide set, keeping the set's
// armed flag true while any point is.
func arm(p *Point, on bool) {
	processMu.Lock()
	defer processMu.Unlock()
	if p.armed.Swap(on) == on {
		return
	}
	if on {
		processArmed++
	} else {
		processArmed--
	}
	process.armed.Store(processArmed > 0)
}

// Disable disarms p in the process-wide set. Disarming a disarmed
// failpoint is a no-op.
func Disable(name string) error {
	p, err := Lookup(name)
	if err != nil {
		return err
	}
	arm(p, false)
	// Status errs only for a failpoint that pingcap holds no terms for,
	// which is disarmed already; one whose arming pingcap refused is in its
	// registry with no channel to close, and its Disable would panic.
	if _, err := failpoint.Status(p.FullName()); err != nil {
		return nil
	}
	return failpoint.Disable(p.FullName())
}

// TB is the part of testing.TB that Scoped needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Scoped arms a failpoint in the process-wide set for the rest of a test
// and disarms it at the test's cleanup, whatever happens.
func Scoped(t TB, name, terms string) {
	t.Helper()
	if err := Enable(name, terms); err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = Disable(name) })
}
