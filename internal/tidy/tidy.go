package tidy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Finding is one banned construct in a file.
type Finding struct {
	Pos     token.Position
	Banned  string // what was found: "time.Now", "go statement"
	Replace string // what to use instead
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: %s is banned here; use %s", f.Pos, f.Banned, f.Replace)
}

// bannedSelectors maps package path and name to the replacement.
var bannedSelectors = map[string]map[string]string{
	"time": {
		"Now":       "the clock: rt.Now() from task.Runtime or clock.Clock",
		"Since":     "rt.Now().Sub(t) on the runtime's clock",
		"Until":     "t.Sub(rt.Now()) on the runtime's clock",
		"Sleep":     "rt.Sleep(d) from task.Runtime",
		"After":     "rt.AfterFunc(d, f) from task.Runtime, or a deadline kept in a field",
		"Tick":      "rt.AfterFunc(d, f) from task.Runtime, or a deadline kept in a field",
		"NewTimer":  "rt.AfterFunc(d, f) from task.Runtime, or a deadline kept in a field",
		"NewTicker": "rt.AfterFunc(d, f) from task.Runtime, or a deadline kept in a field",
		"AfterFunc": "rt.AfterFunc(d, f) from task.Runtime",
	},
	"sync": {
		"Mutex":     "rt.NewMutex(name) from task.Runtime",
		"RWMutex":   "rt.NewMutex(name) from task.Runtime",
		"Cond":      "rt.NewCond(m) from task.Runtime",
		"NewCond":   "rt.NewCond(m) from task.Runtime",
		"WaitGroup": "task.NewGroup(rt, name)",
	},
	"runtime": {
		"Gosched": "rt.Yield(point) from task.Runtime",
	},
	// A context's deadline fires on the wall clock, which the simulator
	// neither sees nor replays.
	"context": {
		"WithTimeout":       "task.WithTimeout(rt, ctx, d), due on the runtime's clock",
		"WithTimeoutCause":  "task.WithTimeoutCause(rt, ctx, d, cause), due on the runtime's clock",
		"WithDeadline":      "task.WithDeadline(rt, ctx, t), due on the runtime's clock",
		"WithDeadlineCause": "task.WithDeadlineCause(rt, ctx, t, cause), due on the runtime's clock",
	},
}

// randAllowed are the math/rand/v2 names that take an explicit seed.
var randAllowed = map[string]bool{"New": true, "NewPCG": true, "NewChaCha8": true, "Rand": true, "PCG": true, "Source": true, "ChaCha8": true}

// Check reports the banned constructs in the non-test Go files of dir.
func Check(dir string) ([]Finding, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []Finding
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		out = append(out, checkFile(fset, f)...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pos.Filename != out[j].Pos.Filename {
			return out[i].Pos.Filename < out[j].Pos.Filename
		}
		return out[i].Pos.Line < out[j].Pos.Line
	})
	return out, nil
}

func checkFile(fset *token.FileSet, f *ast.File) []Finding {
	var out []Finding
	add := func(n ast.Node, banned, replace string) {
		out = append(out, Finding{Pos: fset.Position(n.Pos()), Banned: banned, Replace: replace})
	}
	imports := map[string]string{} // local name → path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if path == "math/rand/v2" {
			local = "rand"
		}
		if imp.Name != nil {
			local = imp.Name.Name
		}
		imports[local] = path
		if path == "math/rand" || path == "crypto/rand" {
			add(imp, `import "`+path+`"`, `rand.New(rand.NewPCG(seed, stream)) from math/rand/v2, passed to whoever draws`)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			add(n, "the go statement", "rt.Go(name, fn) from task.Runtime")
		case *ast.SelectStmt:
			add(n, "select", "a task.Queue or a Cond wait on one condition")
		case *ast.ChanType:
			add(n, "a channel", "task.Queue, or Mutex and Cond from task.Runtime")
		case *ast.SendStmt:
			add(n, "a channel send", "task.Queue.Put")
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				add(n, "a channel receive", "task.Queue.Get")
			}
		case *ast.SelectorExpr:
			id, ok := n.X.(*ast.Ident)
			if !ok {
				return true
			}
			path, ok := imports[id.Name]
			if !ok {
				return true
			}
			if repl, ok := bannedSelectors[path][n.Sel.Name]; ok {
				add(n, path+"."+n.Sel.Name, repl)
			}
			if path == "math/rand/v2" && !randAllowed[n.Sel.Name] {
				add(n, "math/rand/v2."+n.Sel.Name+" (global randomness)", "a *rand.Rand built with rand.New(rand.NewPCG(seed, stream)) and passed in")
			}
		}
		return true
	})
	return out
}
