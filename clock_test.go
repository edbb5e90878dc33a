package httpbreaker

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClockArithmeticSaturates(t *testing.T) {
	const maxD = time.Duration(math.MaxInt64)
	require.Equal(t, int64(math.MaxInt64), later(5, maxD))
	require.Equal(t, int64(math.MaxInt64), later(math.MaxInt64, 1))
	require.Equal(t, int64(15), later(5, 10))
	require.Equal(t, int64(math.MinInt64), later(-5, time.Duration(math.MinInt64)))
	require.Equal(t, maxD, doubled(maxD/2+1))
	require.Equal(t, 4*time.Second, doubled(2*time.Second))
	require.Equal(t, maxD, scaled(maxD, 0.2*5+0.5))
	require.Equal(t, time.Second, scaled(5*time.Second, 0.2))
	epoch := time.Now()
	require.True(t, wall(epoch, math.MaxInt64).After(epoch), "the clock's end is in the future")
	require.Less(t, budget(time.Time{}, epoch), time.Duration(0), "the zero deadline left no budget")
	require.Equal(t, maxD, budget(time.Unix(1<<62, 0), epoch), "a far deadline is very long")
}
