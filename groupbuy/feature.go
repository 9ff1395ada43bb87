package groupbuy

import (
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/feature"
)

// Feature returns the group-buy feature: Flow, its effects, the group service behind
// /v1/deals and /v1/groups, and the group deadlines on the closer's timer.
func Feature() feature.Feature {
	return feature.Feature{Name: FlowName, Flows: []*orderly.Flow{Flow}, Effects: Effects(),
		Build: func(c *feature.Core) (*feature.Parts, error) {
			svc, err := NewService(Config{Store: c.Store, Orders: c.Orders, Signals: c.Signals, Logger: c.Logger})
			if err != nil {
				return nil, fmt.Errorf("group-buy service: %w", err)
			}
			deadlines, err := NewDeadlines(c.Machine, c.Metrics, c.Logger)
			if err != nil {
				return nil, fmt.Errorf("group deadlines: %w", err)
			}
			return &feature.Parts{Service: svc, Timed: []closer.Timed{deadlines}}, nil
		}}
}
