package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
)

// Example embeds orderly in a Go service: an engine on a SQLite file, its workers running,
// its HTTP API mounted under /orderly/ of the service's own mux, an order created through
// the order service and read back over HTTP.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "orderly-example-*")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	e, err := engine.Open(ctx, engine.Config{
		DatabaseURL:    filepath.Join(dir, "orderly.db"),
		CallbackSecret: []byte("example-secret"),
		Gateway:        sim.New(), // the simulated channel: payments move no money
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, features.All()...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	// No Config.Addr: the engine runs its workers and leaves serving HTTP to the service.
	if err := e.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/orderly/", http.StripPrefix("/orderly", e.Handler()))

	if _, err := e.Orders().SetStock(ctx, "SKU-TEA", 10); err != nil {
		fmt.Println(err)
		return
	}
	o, _, err := e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{
		UserID: "user-1", Currency: "EUR", PaymentTimeoutSeconds: 900,
		Items: []orderly.Item{{SKU: "SKU-TEA", Quantity: 2, UnitPrice: 1250}}, // minor units: €12.50
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("created:", o.State, o.Amount, o.Currency, "to pay within", o.ExpiresAt.Sub(o.CreatedAt))

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/orderly/v1/orders/"+o.ID, nil))
	fmt.Println("GET /orderly/v1/orders/{id}:", rec.Code, rec.Header().Get("Content-Type"))

	st, err := e.Orders().Stock(ctx, "SKU-TEA")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("stock:", st.Available, "available,", st.Held, "held")
	// Output:
	// created: pending_payment 2500 EUR to pay within 15m0s
	// GET /orderly/v1/orders/{id}: 200 application/json
	// stock: 8 available, 2 held
}
