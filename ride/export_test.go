package ride

import (
	"context"

	"github.com/orderlyhq/orderly"
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
