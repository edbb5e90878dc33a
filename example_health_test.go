package httpbreaker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/httpbreaker/httpbreaker"
)

// A readiness handler, for the internal port the orchestrator probes: it
// stays ready while a non-critical dependency's breaker is open, reports
// that dependency as degraded, and fails only for the one dependency the
// service cannot work without.
func ExampleTransport_Health() {
	tr := httpbreaker.New(nil)
	const db = "db.internal:5432" // the only critical dependency

	ready := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := tr.Health(db)
		w.Header().Set("Content-Type", "application/json")
		if !h.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	probe := func() {
		rec := httptest.NewRecorder()
		ready.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}

	probe()
	tr.Trip("recommendations.internal", time.Minute) // non-critical: degraded, still ready
	probe()
	tr.Trip(db, time.Minute) // critical: out of rotation
	probe()
	fmt.Println(tr.Health(db).Err())
	// Output:
	// 200 {"ready":true}
	// 200 {"ready":true,"open":["recommendations.internal"]}
	// 503 {"ready":false,"open":["db.internal:5432","recommendations.internal"],"critical_open":["db.internal:5432"]}
	// httpbreaker: not ready: circuit open for critical db.internal:5432
}
