package checkout

import (
	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/feature"
	"github.com/orderlyhq/orderly/saga"
)

// Feature returns the wallet checkout: POST /v1/orders with payment_method "wallet" runs
// its saga (Definition) on the Core's orchestrator. Its Parts.Service is the *Service.
func Feature() feature.Feature {
	return feature.Feature{Name: "wallet_checkout",
		Build: func(c *feature.Core) (*feature.Parts, error) {
			def, err := Definition(Deps{Orders: c.Orders, Wallets: c.Wallets})
			if err != nil {
				return nil, err
			}
			svc, err := NewService(c.Store, c.Orders, c.Sagas)
			if err != nil {
				return nil, err
			}
			return &feature.Parts{Service: svc, Sagas: []saga.Definition{def},
				Orders: func(o orderly.OrderService) orderly.OrderService { return Orders{OrderService: o, Checkout: svc} }}, nil
		}}
}
