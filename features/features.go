// Package features lists the features orderly ships, for engine.Open: cmd/orderly, the
// simulator, the benchmarks and the tests pass All.
package features

import (
	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/checkout"
	"github.com/orderlyhq/orderly/feature"
	"github.com/orderlyhq/orderly/groupbuy"
	"github.com/orderlyhq/orderly/ride"
)

// All returns the standard, group-buy, ride-hailing and wallet-checkout features.
func All() []feature.Feature {
	return []feature.Feature{feature.Standard(), groupbuy.Feature(), ride.Feature(), checkout.Feature()}
}

// Flows returns the registry of the flows of All, for verify.Options.Flows.
func Flows() orderly.Flows {
	flows := orderly.Flows{}
	for _, f := range All() {
		for _, fl := range f.Flows {
			flows[fl.Name] = fl
		}
	}
	return flows
}
