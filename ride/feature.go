package ride

import (
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/feature"
)

// Feature returns the ride-hailing feature: Flow, its effects, the trip service behind
// /v1/trips with its payment sagas, and its reconciliation checks. Trips need card holds:
// without a gateway that has them (orderly.HoldGateway) the feature serves no trips.
func Feature() feature.Feature {
	return feature.Feature{Name: FlowName, Flows: []*orderly.Flow{Flow}, Effects: Effects(),
		Build: func(c *feature.Core) (*feature.Parts, error) {
			holds, ok := c.Gateway.(orderly.HoldGateway)
			if !ok {
				return &feature.Parts{Reconcile: ReconcileChecks()}, nil
			}
			svc, err := New(Config{
				Store: c.Store, Machine: c.Machine, Gateway: holds, Wallets: c.Wallets, Sagas: c.Sagas, Logger: c.Logger,
				Signals: c.Signals,
			})
			if err != nil {
				return nil, fmt.Errorf("ride-hailing: %w", err)
			}
			return &feature.Parts{Service: svc, Sagas: svc.Definitions(), Reconcile: ReconcileChecks()}, nil
		}}
}
