// Command embed is a Go service that embeds orderly instead of running `orderly serve`
// beside it: one engine (package engine) in the service's process, its HTTP API mounted
// under /orderly/ of the service's own chi router, next to the service's own routes, and
// its order service called directly from Go.
//
//	go run ./examples/embed                 # serves on :8090, database ./embed.db
//	curl -s localhost:8090/shop/stock/SKU-TEA
//	curl -s localhost:8090/orderly/v1/orders/<id>
//
// The engine runs its workers (timer, sweep, deep check, outbox relay) in this process;
// several copies of the service on one PostgreSQL or MySQL database coordinate as several
// `orderly serve` instances do. See docs/architecture.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		slog.Error("embed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	secret := os.Getenv("ORDERLY_CALLBACK_SECRET")
	if secret == "" {
		secret = "change-me" // the payment provider signs callbacks with it; keep it secret
	}
	e, err := engine.Open(ctx, engine.Config{Gateway: sim.New(), DatabaseURL: "embed.db", CallbackSecret: []byte(secret)}, features.All()...)
	if err != nil {
		return err
	}
	defer func() {
		if err := e.Close(context.WithoutCancel(ctx)); err != nil {
			slog.Error("close the engine", "error", err)
		}
	}()
	// No Config.Addr: the engine runs its workers, this service serves HTTP.
	if err := e.Start(ctx); err != nil {
		return err
	}
	if _, err := e.Orders().SetStock(ctx, "SKU-TEA", 100); err != nil {
		return err
	}

	r := chi.NewRouter()
	r.Mount("/orderly", e.Handler()) // /orderly/v1/orders, /orderly/readyz, …
	r.Get("/shop/stock/{sku}", func(w http.ResponseWriter, r *http.Request) {
		st, err := e.Orders().Stock(r.Context(), chi.URLParam(r, "sku"))
		if err != nil {
			http.Error(w, orderly.ErrorMessage(err), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})

	srv := &http.Server{Addr: ":8090", Handler: r, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	slog.Info("serving", "addr", srv.Addr, "orderly", "/orderly/")
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
