package props_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// TestPausePassesTheCheckerOnTheRealRuntime: on goroutines, with a 50µs
// step, four clients stream requests — some of two sequences, some aborted
// after their first output or cancelled at once — and reuse their ids at
// once, while a fifth goroutine pauses (abort, wait and keep in turn, with
// and without KeepCache, now and then with a context that expires while
// the pause drains, or before it is sent, when the core never sees it),
// checks IsPaused — true exactly when the core took the pause — and
// resumes, again and again. No
// property breaks — a paused engine runs no step, a pause returns after
// its outputs, a reused id finishes normally — every request ends, each
// caller saw an abort exactly where the checker counts one (its own or a
// pause's), and the pauses did something: every mode took effect, and
// pauses aborted requests their callers did not. Once without async
// scheduling and with prefix caching (blocks of 4), once with async
// scheduling. Under make test it runs with the race detector.
func TestPausePassesTheCheckerOnTheRealRuntime(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			pauseWorkload(t, engine.Config{StepTime: 50 * time.Microsecond, AsyncScheduling: async, EnablePrefixCaching: !async, BlockSize: 4})
		})
	}
}

func pauseWorkload(t *testing.T, cfg engine.Config) {
	const clients, rounds = 4, 60
	c := props.NewChecker(core.ToyModel{})
	c.SetModelLen(core.DefaultMaxModelLen)
	observe := c.Locked()
	var taken atomic.Int32 // pauses the core took
	cfg.Observer = func(ev core.Event) {
		if ev.Kind == core.EventPause {
			taken.Add(1)
		}
		observe(ev)
	}
	e, err := engine.New(cfg)
	require.NoError(t, err)
	defer e.Close()

	questions := []string{"what is the sea", "why is the sun hot", "how far is the moon from the earth", "the of and to in is it you that he was for"}
	kinds := []engine.OutputKind{engine.Cumulative, engine.Delta, engine.FinalOnly}
	errs := make(chan error, 64)
	var sawAbort, pauseAborted atomic.Int32 // requests whose callers saw sequence 0 aborted; those the callers did not abort
	var clientsWG sync.WaitGroup
	for client := range clients {
		clientsWG.Add(1)
		go func() {
			defer clientsWG.Done()
			id := fmt.Sprint("client-", client)
			for round := range rounds {
				p := engine.Params{MaxTokens: 4 + 3*((client+round)%7), Output: kinds[(client+round)%len(kinds)], N: 1 + round%5/4}
				r, err := e.AddRequest(id, questions[(client+round)%len(questions)], p)
				if err != nil {
					errs <- fmt.Errorf("%s round %d: %v", id, round, err)
					return
				}
				var outs []engine.Output
				callerAborted := false
				switch round % 4 {
				case 1:
					if p.Output != engine.FinalOnly {
						o, err := r.Next()
						if err != nil {
							errs <- fmt.Errorf("%s round %d: %v", id, round, err)
							return
						}
						outs = append(outs, o)
					}
					e.Abort(id)
					callerAborted = true
				case 2:
					r.Cancel()
					callerAborted = true
				}
				rest, err := drainAll(r)
				if err != nil {
					errs <- fmt.Errorf("%s round %d: %v", id, round, err)
					return
				}
				outs = append(outs, rest...)
				if len(outs) == 0 || !outs[len(outs)-1].Finished {
					errs <- fmt.Errorf("%s round %d: no finished output", id, round)
					return
				}
				if finishOfFirst(outs) == engine.FinishAbort {
					sawAbort.Add(1)
					if !callerAborted {
						pauseAborted.Add(1)
					}
				}
			}
		}()
	}

	modes := []engine.PauseMode{engine.PauseAbort, engine.PauseWait, engine.PauseKeep}
	var took [3]int // pauses that returned, by mode
	expired := 0    // pauses whose context expired first
	unsent := 0     // of those, the pauses whose context expired before they were sent
	stop := make(chan struct{})
	pauser := make(chan struct{})
	go func() {
		defer close(pauser)
		bg := context.Background()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mode := modes[i%len(modes)]
			ctx, cancel := bg, context.CancelFunc(func() {})
			if i%5 == 4 {
				ctx, cancel = context.WithTimeout(bg, 100*time.Microsecond)
			}
			before := taken.Load()
			err := e.PauseGeneration(ctx, engine.PauseOptions{Mode: mode, KeepCache: i/3%2 == 1})
			cancel()
			switch {
			case err == nil:
				took[mode]++
			case errors.Is(err, context.DeadlineExceeded):
				expired++
			default:
				errs <- fmt.Errorf("pause %d (%s): %v", i, mode, err)
				return
			}
			// The core answers IsPaused after the pause, when it was sent:
			// by then it told of it. A context that expired before the
			// call sent nothing, and only that pause may leave the engine
			// running.
			paused, perr := e.IsPaused(bg)
			sent := taken.Load() > before
			if !sent {
				unsent++
			}
			if perr != nil || paused != sent || !sent && err == nil {
				errs <- fmt.Errorf("pause %d (%s): returned %v, the core took it: %v, IsPaused says %v, %v", i, mode, err, sent, paused, perr)
				return
			}
			time.Sleep(300 * time.Microsecond)
			if err := e.ResumeGeneration(bg); err != nil {
				errs <- fmt.Errorf("resume %d: %v", i, err)
				return
			}
			time.Sleep(700 * time.Microsecond)
		}
	}()

	clientsWG.Wait()
	close(stop)
	<-pauser
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NoError(t, e.ResumeGeneration(context.Background()))
	paused, err := e.IsPaused(context.Background())
	require.NoError(t, err)
	assert.False(t, paused)
	require.NoError(t, e.WaitIdle(context.Background()))
	require.NoError(t, e.Close())
	c.CheckKV(e)

	require.NoError(t, c.Finish())
	assert.Empty(t, c.Violations())
	s := c.Summary()
	assert.Equal(t, clients*rounds, s.Requests)
	assert.Equal(t, clients*rounds, s.Finished, "every request ended")
	assert.Equal(t, clients*(rounds-1), s.Reused, "every round but a client's first reuses its id")
	assert.Equal(t, int(sawAbort.Load()), s.Aborted, "callers saw an abort where the checker counts one, their own or a pause's")
	for m, n := range took {
		assert.Positive(t, n, "no pause of mode %s returned", modes[m])
	}
	assert.Positive(t, pauseAborted.Load(), "no pause aborted a request its caller did not")
	t.Logf("pauses returned: abort %d, wait %d, keep %d; expired first %d (%d before they were sent); requests aborted by a pause %d of %d aborted",
		took[0], took[1], took[2], expired, unsent, pauseAborted.Load(), s.Aborted)
}
