package engine_test

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/task"
)

// newEngine starts an engine on rt and closes it when the test ends (on the
// real runtime) or when the body returns (the caller defers Close under the
// simulator, where the run ends with the body).
func newEngine(t *testing.T, rt task.Runtime, cfg engine.Config) *engine.AsyncLLM {
	t.Helper()
	cfg.Runtime = rt
	e, err := engine.New(cfg)
	require.NoError(t, err)
	return e
}

func add(t *testing.T, e *engine.AsyncLLM, id, prompt string, p engine.Params) *engine.Request {
	t.Helper()
	r, err := e.AddRequest(id, prompt, p)
	require.NoError(t, err, "AddRequest(%q)", id)
	return r
}

// drain reads r to its end and returns every output.
func drain(t *testing.T, r *engine.Request) []engine.Output {
	t.Helper()
	var outs []engine.Output
	for {
		out, err := r.Next()
		if errors.Is(err, io.EOF) {
			return outs
		}
		require.NoError(t, err, "Next of %q", r.ID())
		outs = append(outs, out)
	}
}

// tokensOf returns the tokens a request received: the concatenation of its
// deltas, or the tokens of its last output.
func tokensOf(kind engine.OutputKind, outs []engine.Output) []int {
	if len(outs) == 0 {
		return nil
	}
	if kind != engine.Delta {
		return outs[len(outs)-1].TokenIDs
	}
	var all []int
	for _, o := range outs {
		all = append(all, o.TokenIDs...)
	}
	return all
}

func textOf(kind engine.OutputKind, outs []engine.Output) string {
	if len(outs) == 0 {
		return ""
	}
	if kind != engine.Delta {
		return outs[len(outs)-1].Text
	}
	s := ""
	for _, o := range outs {
		s += o.Text
	}
	return s
}

// want returns the model's first n tokens for prompt.
func want(prompt string, n int) []int {
	return core.Tokens(core.ToyModel{}, core.Tokenizer{}.Encode(prompt), n)
}

func last(outs []engine.Output) engine.Output {
	if len(outs) == 0 {
		return engine.Output{}
	}
	return outs[len(outs)-1]
}

var allKinds = []engine.OutputKind{engine.Cumulative, engine.Delta, engine.FinalOnly}
