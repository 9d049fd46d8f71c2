package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/clock"
)

func TestRealAfterFuncRunsOnceAndStopReportsIt(t *testing.T) {
	c := clock.Real()
	ran := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(ran) })
	<-ran

	stopped := c.AfterFunc(time.Hour, func() { t.Error("a stopped timer fired") })
	require.True(t, stopped.Stop(), "first Stop of a pending timer")
	require.False(t, stopped.Stop(), "second Stop")
}

func TestRealNowMovesForward(t *testing.T) {
	c := clock.Real()
	a := c.Now()
	b := c.Now()
	require.False(t, b.Before(a))
}
