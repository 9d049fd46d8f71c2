package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAnAbortedRequestsFlushedStoreCompletesOnce: a reset preempts a with
// the copy of its store in flight (flushed, to be told with the next
// step's output); the copy lands, and a, waiting, is aborted: its store
// completes then. It must not complete again with the next step's output:
// it did, telling host memory's report twice, and since a store is found
// by its request's internal id, the second completion took the store of
// b, which reused the id (as the legacy engine's ids are reused), and b's
// block, held until b's store landed, was never given back (a leak found
// by TestBlocksPropertyWithOffload).
func TestAnAbortedRequestsFlushedStoreCompletesOnce(t *testing.T) {
	s := NewScheduler(Config{BlockSize: 2, NumBlocks: 3, MaxNumSeqs: 1, EnablePrefixCaching: true, MaxNumBatchedTokens: 2, KVOffloadBlocks: 1}.WithDefaults())
	var done []StoreDone
	step := func() []StoreJob {
		so := s.Schedule()
		require.Len(t, so.Scheduled, 1)
		s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
		jobs, d, _ := s.TakeStores()
		done = append(done, d...)
		require.NoError(t, s.CheckBlocks())
		return jobs
	}
	a := &Request{InternalID: "x", ExternalID: "x", Incarnation: 1, Prompt: []int{1, 2}, Params: SamplingParams{MaxTokens: 2}}
	require.NoError(t, s.AddRequest(a))
	jobs := step()
	require.Len(t, jobs, 1, "a's full block goes to host memory")
	preempted, ok := s.ResetPrefixCache(true)
	require.True(t, ok)
	require.Equal(t, []*Request{a}, preempted)
	require.True(t, s.offload.stores["x"].flushed, "a's store waits to be told")
	r, _, _, _ := s.CompleteStore(jobs[0].ID, jobs[0].Job)
	require.Same(t, a, r, "a's copy landed")
	s.FinishRequests([]string{"x"}, StatusFinishedAborted)
	assert.Empty(t, s.offload.flushed, "a's store completed with its end")
	assert.NotContains(t, s.offload.stores, "x")

	b := &Request{InternalID: "x", ExternalID: "x", Incarnation: 2, Prompt: []int{1, 2}, Params: SamplingParams{MaxTokens: 1}}
	require.NoError(t, s.AddRequest(b))
	jobs = step()
	require.Equal(t, StatusFinishedLength, b.Status)
	require.Len(t, jobs, 1, "b's full block goes to host memory as b ends")
	require.Contains(t, s.offload.stores, "x", "b's store holds its block until its copy lands")
	assert.Equal(t, 1, s.Stats().KVUsedBlocks)
	s.CompleteStore(jobs[0].ID, jobs[0].Job)
	assert.Zero(t, s.Stats().KVUsedBlocks, "b's block went back as its store landed")
	require.NoError(t, s.CheckBlocks())
	var told int
	for _, d := range done {
		if d.R == a {
			told++
		}
	}
	assert.Equal(t, 1, told, "a's store is told once")
}
