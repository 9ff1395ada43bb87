package ride

import (
	"context"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/saga"
)

// EndAndDie ends trip id as EndTrip does and returns before running its payment saga: a
// process that dies the moment the move commits.
func (s *Service) EndAndDie(ctx context.Context, id string, fare int64) (*orderly.Trip, error) {
	t, _, err := s.end(ctx, id, fare)
	return t, err
}

// RefundAndDie moves trip id to refunding as RefundTrip does and returns before running
// its refund saga.
func (s *Service) RefundAndDie(ctx context.Context, id string) (*orderly.Trip, error) {
	t, _, err := s.refund(ctx, id)
	return t, err
}

// Uncapture runs the payment saga's capture compensation (a later step failed, or the
// capture's outcome stayed unknown past its deadline).
func (s *Service) Uncapture(ctx context.Context, c *saga.Call) error { return s.uncapture(ctx, c) }
