package eapache

import (
	"testing"

	"github.com/httpbreaker/httpbreaker/bench/internal/harness"
)

func BenchmarkClosed(b *testing.B)    { harness.Closed(b, Lib) }
func BenchmarkParallel(b *testing.B)  { harness.Parallel(b, Lib) }
func BenchmarkManyHosts(b *testing.B) { harness.ManyHosts(b, Lib) }
func BenchmarkOpen(b *testing.B)      { harness.Open(b, Lib) }
func BenchmarkLoopback(b *testing.B)  { harness.Loopback(b, Lib) }
