package redisstore_test

import (
	"log"
	"log/slog"

	"github.com/httpbreaker/httpbreaker"
	"github.com/httpbreaker/httpbreaker/redisstore"
	"github.com/redis/go-redis/v9"
)

// Every instance of the service does the same: one Store per process,
// shared by its Transports, with the same Prefix across the fleet.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // lets Options.OpTimeout cut slow calls short
	})
	defer rdb.Close()

	store, err := redisstore.New(rdb, redisstore.Options{
		Prefix: "checkout",
		Logger: slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // before rdb.Close: deferred calls run last-in, first-out

	client := httpbreaker.NewClient(httpbreaker.WithStore(store))
	_ = client // use it as any *http.Client
}
