package httpbreaker

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestHotFieldLayout pins the field order that keeps the closed path to
// few cache lines (see BenchmarkClosedCold): what a request reads of a
// breaker before its bucket fits in the first 64 bytes, buckets start on
// a line and never straddle one, and the Transport's request-path fields
// end within its first two lines.
func TestHotFieldLayout(t *testing.T) {
	var b breaker
	require.Less(t, unsafe.Offsetof(b.win)+unsafe.Offsetof(b.win.width), uintptr(64))
	require.Less(t, unsafe.Offsetof(b.word), uintptr(64))
	require.Less(t, unsafe.Offsetof(b.retryAt), uintptr(64))
	require.Zero(t, (unsafe.Offsetof(b.win)+unsafe.Offsetof(b.win.buckets))%64)
	require.Zero(t, 64%unsafe.Sizeof(b.win.buckets[0]))

	var tr Transport
	for _, off := range []uintptr{
		unsafe.Offsetof(tr.cfg.keyFunc),
		unsafe.Offsetof(tr.cfg.plain),
		unsafe.Offsetof(tr.cfg.rejectAsError),
		unsafe.Offsetof(tr.cfg.classifier),
		unsafe.Offsetof(tr.cfg.slowCall),
		unsafe.Offsetof(tr.cfg.maxConcurrent),
	} {
		require.Less(t, unsafe.Offsetof(tr.cfg)+off, uintptr(128))
	}
	require.Less(t, unsafe.Offsetof(tr.epoch), uintptr(128))
}

// TestBreakerSizeClass: the allocator's size classes from 512 to 1024
// bytes are all multiples of 64, so a breaker of such a size starts on a
// cache line, as TestHotFieldLayout assumes.
func TestBreakerSizeClass(t *testing.T) {
	size := unsafe.Sizeof(breaker{})
	require.Greater(t, size, uintptr(512))
	require.LessOrEqual(t, size, uintptr(1024))
}
