// Package engine is orderly's composition root (docs/architecture.md): the one place
// that wires the store, the flow registry, the order and payment services, the close path
// (precise timer, sweep, deep check), the transactional outbox relay, the leased jobs and
// the HTTP API into a running instance. `orderly serve`, the project's end-to-end tests and
// a Go service that embeds orderly all use it:
//
//	e, err := engine.Open(ctx, engine.Config{DatabaseURL: "orderly.db", CallbackSecret: secret,
//		Channels: []channel.Adapter{stripe.New(…)}, DefaultChannel: "stripe"}, features.All()...)
//	if err != nil { … }
//	defer e.Close(context.Background())
//	if err := e.Start(ctx); err != nil { … }        // workers; HTTP too when Config.Addr is set
//	mux.Handle("/orderly/", http.StripPrefix("/orderly", e.Handler()))
//	order, _, err := e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{…})
//
// Open builds everything and starts nothing; Start runs the background workers (and the
// HTTP listener when Config.Addr is set); Close stops them in dependency order (HTTP, then
// the timer and jobs, then the relay, then the database). Several engines on one
// PostgreSQL or MySQL database coordinate through it (row locks, SKIP LOCKED, leases), as
// several `orderly serve` processes do.
package engine
