package httpbreaker

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBreakerTableModel checks the table against a map through random
// inserts and removes, across growth and tombstone rehashes.
func TestBreakerTableModel(t *testing.T) {
	tab := newBreakerTable()
	model := map[string]*circuit{}
	r := rand.New(rand.NewPCG(3, 4))
	for step := range 20000 {
		key := "k" + strconv.Itoa(r.IntN(300))
		if b, ok := model[key]; ok && r.IntN(2) == 0 {
			tab.remove(b)
			delete(model, key)
		} else if !ok {
			b := testCircuit(key)
			tab.insert(b)
			model[key] = b
		}
		if step%97 == 0 {
			for i := range 300 {
				k := "k" + strconv.Itoa(i)
				require.Same(t, model[k], tab.get(k), "step %d key %s", step, k)
			}
			seen := map[string]bool{}
			tab.each(func(b *circuit) bool {
				require.False(t, seen[b.key()], "each visits %s twice", b.key())
				seen[b.key()] = true
				require.Same(t, model[b.key()], b)
				return true
			})
			require.Len(t, seen, len(model))
			require.Equal(t, len(model), tab.live)
		}
	}
	// Churn leaves the table sized by its live breakers, not its history.
	require.LessOrEqual(t, len(tab.slots.Load().slots), 4*minTableSlots+4*300)
}

// TestBreakerTableEmptyKey checks that the empty key is not confused
// with a tombstone.
func TestBreakerTableEmptyKey(t *testing.T) {
	tab := newBreakerTable()
	require.Nil(t, tab.get(""))
	a, b := testCircuit("a"), testCircuit("")
	tab.insert(a)
	tab.remove(a)
	require.Nil(t, tab.get(""))
	tab.insert(b)
	require.Same(t, b, tab.get(""))
	require.Nil(t, tab.get("a"))
}

// TestBreakerTableConcurrentReads reads while a writer grows and churns
// the table: a reader always finds the keys that are never removed
// (run with -race).
func TestBreakerTableConcurrentReads(t *testing.T) {
	tab := newBreakerTable()
	stable := make([]*circuit, 50)
	for i := range stable {
		stable[i] = testCircuit("stable" + strconv.Itoa(i))
		tab.insert(stable[i])
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				for _, b := range stable {
					if got := tab.get(b.key()); got != b {
						t.Errorf("get(%q) = %p, want %p", b.key(), got, b)
						return
					}
				}
			}
		}()
	}
	var churn []*circuit
	for i := range 5000 {
		b := testCircuit("churn" + strconv.Itoa(i))
		tab.insert(b)
		churn = append(churn, b)
		if len(churn) > 200 {
			tab.remove(churn[0])
			churn = churn[1:]
		}
	}
	close(done)
	wg.Wait()
}

// TestBreakerTableHash checks the table's hash over every length class:
// equal keys hash equal wherever their bytes live, and distinct keys
// (here, 20,000 of them) do not collide in 64 bits.
func TestBreakerTableHash(t *testing.T) {
	tab := newBreakerTable()
	r := rand.New(rand.NewPCG(5, 6))
	seen := map[uint64]string{}
	for i := range 20000 {
		b := make([]byte, i%80)
		for j := range b {
			b[j] = byte('a' + r.IntN(26))
		}
		key := string(b)
		h := tab.hash(key)
		if other, dup := seen[h]; dup && other != key {
			t.Fatalf("%q collides with %q", key, other)
		}
		seen[h] = key
		copied := strings.Clone("x" + key)[1:]
		require.Equal(t, tab.hash(key), tab.hash(copied))
	}
	// One byte changed anywhere changes the hash.
	key := strings.Repeat("0123456789", 7)
	for n := 1; n <= len(key); n++ {
		for i := range n {
			b := []byte(key[:n])
			b[i] ^= 1
			require.NotEqual(t, tab.hash(key[:n]), tab.hash(string(b)), "len %d byte %d", n, i)
		}
	}
	require.NotEqual(t, tab.hash("a"), newBreakerTable().hash("a"), "tables are seeded")
}
