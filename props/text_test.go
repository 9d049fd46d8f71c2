package props_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"pgregory.net/rapid"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// textRequest is one request of a client in TestTheTextOfAnyRequestIsItsTokensDecoding.
type textRequest struct {
	id     string
	params engine.Params
	reads  int  // outputs read before a cancel
	cancel bool // cancel after reads outputs, if it has not finished
}

// TestTheTextOfAnyRequestIsItsTokensDecoding draws requests whose stop
// strings are cut from the model's own text at any byte — so that they
// span token boundaries, begin inside MinTokens, or never match — with
// every output kind, stop tokens, slow readers, cancels and reused ids,
// under a drawn schedule; the checker holds the text of every output to
// the decoding of its tokens. The swarm scenario's stop strings begin at a
// token or inside one word, so only these reach across a boundary.
func TestTheTextOfAnyRequestIsItsTokensDecoding(t *testing.T) {
	const prompt = "hello"
	toks := core.Tokens(core.ToyModel{}, core.Tokenizer{}.Encode(prompt), 12)
	text := core.Tokenizer{}.Decode(toks)
	rapid.Check(t, func(t *rapid.T) {
		var scripts [2][]textRequest
		for i := range scripts {
			for range rapid.IntRange(1, 4).Draw(t, "requests") {
				p := engine.Params{MaxTokens: rapid.IntRange(1, len(toks)).Draw(t, "max"), Output: engine.OutputKind(rapid.IntRange(0, 2).Draw(t, "kind"))}
				p.MinTokens = rapid.IntRange(0, p.MaxTokens).Draw(t, "min")
				for range rapid.IntRange(0, 2).Draw(t, "stops") {
					from := rapid.IntRange(0, len(text)-1).Draw(t, "from")
					p.Stop = append(p.Stop, text[from:rapid.IntRange(from+1, min(len(text), from+12)).Draw(t, "to")])
				}
				if rapid.IntRange(0, 3).Draw(t, "stop-token") == 0 {
					p.StopTokenIDs = []int{rapid.SampledFrom(toks).Draw(t, "stop-token-id")}
				}
				scripts[i] = append(scripts[i], textRequest{id: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "id"), params: p,
					reads: rapid.IntRange(0, 3).Draw(t, "reads"), cancel: rapid.Bool().Draw(t, "cancel")})
			}
		}
		res := sim.Run(sim.Options{Chooser: props.RapidChooser(t, "schedule"), Strategy: sim.Chaos(), HangAfter: hangAfter}, func(rt task.Runtime) error {
			c := props.NewChecker(core.ToyModel{})
			e, err := engine.New(engine.Config{Runtime: rt, Observer: c.Observe, StepTime: 200 * 1000})
			if err != nil {
				return err
			}
			var errs []error
			clients := task.NewGroup(rt, "clients")
			for i, script := range scripts {
				clients.Go(fmt.Sprintf("client-%d", i), func() {
					for _, q := range script {
						r, err := e.AddRequest(q.id, prompt, q.params)
						if errors.Is(err, engine.ErrDuplicateRequestID) {
							continue // the other client holds the id
						}
						if err != nil {
							errs = append(errs, err)
							return
						}
						for k := 0; ; k++ {
							if q.cancel && k == q.reads {
								r.Cancel()
							}
							out, err := r.Next()
							if errors.Is(err, io.EOF) || err == nil && out.Finished {
								break
							}
							if err != nil {
								errs = append(errs, err)
								return
							}
						}
					}
				})
			}
			clients.Wait()
			e.Close()
			c.CheckKV(e)
			return errors.Join(c.Finish(), errors.Join(errs...))
		})
		if res.Err != nil {
			t.Fatalf("%v", res.Err)
		}
	})
}
