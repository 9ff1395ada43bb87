// Package feature is the seam of the engine's plug-ins: a Feature brings one way of
// selling (a flow and what serves it) to engine.Open, built from the Core the engine
// builds first. The engine knows no feature; cmd/orderly passes them (package features).
package feature

import (
	"log/slog"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
	"github.com/orderlyhq/orderly/wallet"
)

// Feature is one plug-in of the engine. Flows and Effects are known before anything is
// built (the engine's one order.Machine is made of every feature's); Build then makes the
// feature's services on the Core.
type Feature struct {
	Name    string                  // unique among the features of an engine: "group_buy"
	Flows   []*orderly.Flow         // added to the engine's registry
	Effects map[string]order.Effect // named effects of Flows (a name registered twice is refused)
	// Build builds the feature on c; nil: the feature is its flows and effects only.
	Build func(c *Core) (*Parts, error)
}

// Core is what the engine builds before its features and gives to each Build: the
// flow-agnostic machinery and application services. Nothing in it is set later.
type Core struct {
	Store    store.Store
	Machine  *order.Machine
	Orders   *order.Service
	Payments *payment.Service
	Wallets  *wallet.Service
	// Sagas runs the features' sagas (Parts.Sagas are defined on it before Open returns).
	Sagas *saga.Orchestrator
	// Gateway serves the channel "sim" (a real provider's or the simulated one); nil
	// when "sim" is not served. A feature asks it for what it needs (card holds).
	Gateway orderly.Gateway
	// Signals wakes the timer and the outbox relay after a commit.
	Signals orderly.Signals
	Logger  *slog.Logger
	Metrics *telemetry.Metrics
}

// Parts is what a feature's Build brings to the engine.
type Parts struct {
	// Service is the feature's service, served by the HTTP API when it is one of the API's
	// ports (orderly.GroupService: /v1/deals and /v1/groups; orderly.TripService:
	// /v1/trips), and returned by engine.Engine.Service under the feature's name.
	Service any
	// Orders, when set, wraps the order service the HTTP API serves (a payment method of
	// POST /v1/orders the feature handles).
	Orders    func(orderly.OrderService) orderly.OrderService
	Timed     []closer.Timed            // more timed kinds of the closer
	Handlers  map[string]outbox.Handler // outbox handlers by topic
	Sagas     []saga.Definition         // defined on Core.Sagas
	Reconcile []reconcile.Check         // more reconciliation checks
}

// Standard is the feature of orderly.StandardFlow: an order paid at a gateway or from a
// wallet, closed unpaid at its payment deadline.
func Standard() Feature {
	return Feature{Name: orderly.FlowStandard, Flows: []*orderly.Flow{orderly.StandardFlow}}
}
