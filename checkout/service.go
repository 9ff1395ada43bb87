package checkout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
)

// Service runs wallet checkouts on an orchestrator that has the Definition registered.
type Service struct {
	store  store.Store
	orders *order.Service
	sagas  *saga.Orchestrator
}

// NewService returns a Service; it returns an error when an argument is nil.
func NewService(st store.Store, orders *order.Service, sagas *saga.Orchestrator) (*Service, error) {
	if st == nil || orders == nil || sagas == nil {
		return nil, errors.New("checkout: a store, an order service and an orchestrator are required")
	}
	return &Service{store: st, orders: orders, sagas: sagas}, nil
}

// Checkout creates an order paid from the user's wallet (p.PaymentMethod must be
// orderly.PaymentMethodWallet): it looks up p.IdempotencyKey (a replay returns the first
// order and created=false; another body under the key is EIDEMPOTENCY), then runs the
// saga in the caller's goroutine (saga.Orchestrator.Run) and answers the order its pay step
// wrote (saga.Instance.Kept), or reads it when the saga did not end in that run.
//
// Outcomes: the saga succeeded → the order, paid, created=true. A step waits for a retry
// (a transient failure) → the order as it stands, pending_payment, created=true: the
// engine's timer runs the retry, and GET /v1/sagas/{order id} shows the log; when that
// step is the first, so that no order exists yet, EUNAVAILABLE naming the saga. The saga
// compensated → an error whose code is the failure's: EINSUFFICIENT (the wallet's available
// balance is less than the amount, or the user has no wallet in the currency; 409
// insufficient-funds), EOUTOFSTOCK, ECOUPONUNAVAIL, EINVALID, EIDEMPOTENCY, ENOTPAYABLE,
// or ECONFLICT for a step whose outcome stayed unknown past its deadline; the order, when
// one was written, is closed with the matching close_reason (once the compensations ran:
// one may still wait for its retry) and the error names it.
// Validation errors (EINVALID) are returned before anything is written.
func (s *Service) Checkout(ctx context.Context, p *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
	if p.PaymentMethod != orderly.PaymentMethodWallet {
		return nil, false, orderly.Errorf(orderly.EINVALID, "payment_method must be %q for a wallet checkout", orderly.PaymentMethodWallet)
	}
	if err := order.ValidateCreate(p); err != nil {
		return nil, false, err
	}
	if flow, err := s.orders.Machine().Flow(p.Flow); p.Flow != "" && (err != nil || flow.Name != orderly.FlowStandard) {
		return nil, false, orderly.Errorf(orderly.EINVALID, "payment_method wallet is for orders of flow %s", orderly.FlowStandard)
	}
	if o, found, err := s.replay(ctx, p); err != nil || found {
		return o, false, err
	}
	id, err := order.NewID()
	if err != nil {
		return nil, false, err
	}
	in, err := json.Marshal(input{Order: *p, IdempotencyKey: p.IdempotencyKey, Actor: p.Actor, TraceID: p.TraceID})
	if err != nil {
		return nil, false, fmt.Errorf("checkout input: %w", err)
	}
	inst, err := s.sagas.Run(ctx, &saga.StartParams{Definition: Name, ID: id, Input: in})
	if err != nil {
		return nil, false, fmt.Errorf("wallet checkout %s: %w", id, err)
	}
	switch inst.State {
	case saga.StateCompensated, saga.StateStuck, saga.StateCompensating:
		// Compensating: a compensation waits for its retry; the order closes when it runs.
		code := codeOf(inst.LastError)
		if code == orderly.EIDEMPOTENCY {
			// A concurrent request with the same key won: answer its order.
			if o, found, err := s.replay(ctx, p); err != nil || found {
				return o, false, err
			}
		}
		o, err := s.orders.Order(ctx, id)
		if err != nil {
			return nil, false, orderly.Errorf(code, "wallet checkout failed, no order written: %s", inst.LastError)
		}
		return nil, false, orderly.Errorf(code, "wallet checkout failed: order %s is %s (%s), saga %s %s: %s",
			o.ID, o.State, o.CloseReason, inst.ID, inst.State, inst.LastError)
	}
	if paid, ok := inst.Kept().(*orderly.Order); ok && inst.State == saga.StateSucceeded {
		// The saga ended in its first transaction: its pay step kept the order as written.
		s.orders.Created(ctx, paid)
		return paid, true, nil
	}
	o, err := s.orders.Order(ctx, id)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		// The order step itself waits for its retry: nothing to show yet.
		return nil, false, orderly.Errorf(orderly.EUNAVAILABLE, "wallet checkout %s is in progress: its first step waits for a retry "+
			"(GET /v1/sagas/%s; the same Idempotency-Key answers its order)", id, id)
	} else if err != nil {
		return nil, false, err
	}
	s.orders.Created(ctx, o) // the timer learns its deadline (a pending order waits for a retry)
	return o, true, nil
}

// replay answers an earlier order of p's Idempotency-Key (order.Replay); without a key it
// reads nothing.
func (s *Service) replay(ctx context.Context, p *orderly.CreateOrderParams) (o *orderly.Order, found bool, err error) {
	if p.IdempotencyKey == "" {
		return nil, false, nil
	}
	err = s.store.Read(ctx, func(tx store.Tx) error {
		o, found, err = order.Replay(ctx, tx, p)
		return err
	})
	return o, found, err
}

// codeOf returns the error code at the end of a recorded error ("… [insufficient-funds]",
// orderly.Error's text); ECONFLICT when there is none (a transient failure whose outcome
// stayed unknown).
func codeOf(msg string) string {
	if strings.HasSuffix(msg, "]") {
		if i := strings.LastIndex(msg, "["); i >= 0 {
			code := msg[i+1 : len(msg)-1]
			if code != orderly.EINTERNAL && code != "" && !strings.ContainsAny(code, " ") {
				return code
			}
		}
	}
	return orderly.ECONFLICT
}

// Orders puts the wallet checkout in front of an order service: CreateOrder with
// payment_method "wallet" runs Checkout, everything else goes to OrderService.
type Orders struct {
	orderly.OrderService
	Checkout *Service
}

// CreateOrder implements orderly.OrderService.
func (o Orders) CreateOrder(ctx context.Context, p *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
	if p.PaymentMethod == orderly.PaymentMethodWallet {
		return o.Checkout.Checkout(ctx, p)
	}
	return o.OrderService.CreateOrder(ctx, p)
}
