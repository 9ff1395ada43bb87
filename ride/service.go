package ride

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
)

// Defaults of Config.
const (
	DefaultHoldMarginPercent  = 25              // hold = estimate + 25 % (rounded up)
	DefaultHoldTTL            = 2 * time.Hour   // how long the card hold lasts
	DefaultCancellationFee    = 500             // minor units, after a driver was assigned
	DefaultPlatformFeePercent = 20              // of what the rider paid, to the platform
	DefaultPlatformAccount    = "ride_platform" // owner of the platform's wallet
	// MaxEstimate caps a trip's estimate (minor units), far from int64 overflow.
	MaxEstimate = 1_000_000_000_000
)

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	Store   store.Store           // required
	Machine *order.Machine        // required; its flows hold Flow
	Gateway orderly.HoldGateway   // required: the card holds
	Wallets orderly.WalletService // required: settlement credits
	Sagas   *saga.Orchestrator    // required: runs Definitions
	// HoldMarginPercent is added to the estimate for the hold: hold = ⌈estimate × (100 +
	// margin) / 100⌉. 25.
	HoldMarginPercent int64
	// HoldTTL is how long the hold lasts at the gateway; a trip still requested at its end
	// closes (hold_expired). 2 h.
	HoldTTL time.Duration
	// CancellationFee (minor units) is captured from the hold when the rider cancels after a
	// driver was assigned (driver_assigned or in_trip), capped at the hold; cancelling a
	// requested trip is free. 500; negative for no fee.
	CancellationFee int64
	// PlatformFeePercent of what the rider paid goes to the platform's wallet, the rest to
	// the driver's (rounded down for the platform). 20.
	PlatformFeePercent int64
	// PlatformAccount names the platform's role account, "role:<currency>:<name>" (never
	// below zero, and out of the buyers' reach: no user id addresses it). "ride_platform".
	// A driver's payouts go to the role account "role:<currency>:driver:<driver id>".
	PlatformAccount string
	// Signals is told of each trip committed with its deadline; nil drops them.
	Signals orderly.Signals
	Logger  *slog.Logger
}

// Service implements orderly.TripService. Build it with New and give Definitions to its
// saga orchestrator (saga.Orchestrator.Define).
type Service struct {
	cfg  Config
	flow *orderly.Flow
}

var _ orderly.TripService = (*Service)(nil)

// New returns a Service; it returns an error when a required field is missing or the
// machine has no ride_hailing flow.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Machine == nil || cfg.Gateway == nil || cfg.Wallets == nil || cfg.Sagas == nil {
		return nil, errors.New("ride: Config.Store, Machine, Gateway, Wallets and Sagas are required")
	}
	flow, err := cfg.Machine.Flow(FlowName)
	if err != nil {
		return nil, fmt.Errorf("ride: %w", err)
	}
	cfg.HoldMarginPercent = cmp.Or(cfg.HoldMarginPercent, DefaultHoldMarginPercent)
	cfg.HoldTTL = cmp.Or(cfg.HoldTTL, DefaultHoldTTL)
	cfg.CancellationFee = max(cmp.Or(cfg.CancellationFee, DefaultCancellationFee), 0)
	cfg.PlatformFeePercent = cmp.Or(cfg.PlatformFeePercent, DefaultPlatformFeePercent)
	cfg.PlatformAccount = cmp.Or(cfg.PlatformAccount, DefaultPlatformAccount)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	return &Service{cfg: cfg, flow: flow}, nil
}

// HoldFor returns the hold placed for an estimate: ⌈estimate × (100 + margin) / 100⌉.
func (s *Service) HoldFor(estimate int64) int64 {
	return (estimate*(100+s.cfg.HoldMarginPercent) + 99) / 100
}

// CreateTrip implements orderly.TripService. The hold is placed first, under the new
// trip's id (its idempotency key), then the trip is written; a hold whose trip could not
// be written is never captured and expires at the gateway. Errors: EINVALID, EUNAVAILABLE
// (the gateway did not answer), the gateway's refusal.
func (s *Service) CreateTrip(ctx context.Context, p *orderly.CreateTripParams) (*orderly.Trip, error) {
	switch {
	case !order.ValidID(p.RiderID):
		return nil, orderly.Errorf(orderly.EINVALID, "rider_id must be 1–128 bytes of UTF-8 without control characters")
	case !orderly.ValidCurrency(p.Currency):
		return nil, orderly.Errorf(orderly.EINVALID, "currency must be an ISO 4217 code")
	case p.Estimate <= 0 || p.Estimate > MaxEstimate:
		return nil, orderly.Errorf(orderly.EINVALID, "estimate must be 1 to %d minor units", int64(MaxEstimate))
	case p.PaymentMethod != "" && p.PaymentMethod != orderly.PaymentMethodCard:
		return nil, orderly.Errorf(orderly.EINVALID, "payment_method must be %q", orderly.PaymentMethodCard)
	}
	if err := p.Metadata.Validate(); err != nil {
		return nil, err
	}
	id, err := order.NewID()
	if err != nil {
		return nil, err
	}
	amount := s.HoldFor(p.Estimate)
	var h *orderly.Hold
	for attempt := 0; ; attempt++ { // Authorize is idempotent on the hold id: a lost reply is retried
		if h, err = s.cfg.Gateway.Authorize(ctx, id, amount, s.cfg.HoldTTL); err == nil || !errors.Is(err, orderly.ErrGatewayTimeout) || attempt == 2 {
			break
		}
	}
	if errors.Is(err, orderly.ErrGatewayTimeout) {
		return nil, orderly.Errorf(orderly.EUNAVAILABLE, "the gateway did not answer the hold of trip %s; retry", id)
	} else if err != nil {
		return nil, fmt.Errorf("hold of trip %s: %w", id, err)
	}
	// Times are stored in ms: the trip's deadline is the hold's expiry rounded up, never
	// before the gateway lets the hold lapse.
	expires := h.ExpiresAt.UTC().Truncate(time.Millisecond)
	if expires.Before(h.ExpiresAt) {
		expires = expires.Add(time.Millisecond)
	}
	t := &orderly.Trip{ID: id, RiderID: p.RiderID, State: StateRequested, PaymentMethod: orderly.PaymentMethodCard,
		Currency: p.Currency, Estimate: p.Estimate, HoldID: id, HoldAmount: h.Amount, HoldExpiresAt: expires, Version: 1,
		Metadata: p.Metadata}
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		t.CreatedAt, t.UpdatedAt = now, now
		o := &orderly.Order{ID: id, UserID: p.RiderID, Flow: FlowName, State: StateRequested, PayStatus: orderly.PayUnpaid,
			Items: []orderly.Item{}, Currency: p.Currency, CreatedAt: now, ExpiresAt: t.HoldExpiresAt,
			CloseAt: t.HoldExpiresAt, Version: 1, Metadata: p.Metadata}
		if err := s.cfg.Machine.Insert(ctx, tx, &store.OrderInsertParams{Order: o}); err != nil {
			return err
		}
		if err := tx.TransitionInsert(ctx, &orderly.Transition{OrderID: id, To: StateRequested, Event: orderly.EventCreate,
			PayStatusTo: orderly.PayUnpaid, Actor: cmp.Or(p.Actor, "rider"), At: now, TraceID: p.TraceID}); err != nil {
			return err
		}
		return tx.TripInsert(ctx, t)
	})
	if err != nil {
		return nil, fmt.Errorf("create trip %s: %w", id, err)
	}
	s.cfg.Signals.OrderCreated(ctx, id, t.HoldExpiresAt)
	return t, nil
}

// Trip implements orderly.TripService.
func (s *Service) Trip(ctx context.Context, id string) (*orderly.Trip, error) {
	var t *orderly.Trip
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		t, err = tx.TripGet(ctx, id)
		return err
	})
	return t, err
}

// AssignDriver implements orderly.TripService.
func (s *Service) AssignDriver(ctx context.Context, id, driverID string) (*orderly.Trip, error) {
	if !order.ValidID(driverID) {
		return nil, orderly.Errorf(orderly.EINVALID, "driver_id must be 1–128 bytes of UTF-8 without control characters")
	}
	t, _, err := s.move(ctx, id, EventAssign, "", func(t *orderly.Trip, _ orderly.State) (*sagaStart, error) {
		t.DriverID = driverID
		return nil, nil
	})
	return t, err
}

// StartTrip implements orderly.TripService.
func (s *Service) StartTrip(ctx context.Context, id string) (*orderly.Trip, error) {
	t, _, err := s.move(ctx, id, EventStart, "", nil)
	return t, err
}

// EndTrip implements orderly.TripService. The trip moves to trip_ended with its fare, and
// its payment saga is written, in one transaction; then the saga runs in the caller's
// goroutine (the timer runs it when this process dies first). Ending a trip_ended trip
// again with the same fare returns it (and starts its saga if a trip ended before the two
// were written together has none); another fare is EILLEGAL.
func (s *Service) EndTrip(ctx context.Context, id string, fare int64) (*orderly.Trip, error) {
	if fare <= 0 || fare > MaxEstimate {
		return nil, orderly.Errorf(orderly.EINVALID, "fare must be 1 to %d minor units", int64(MaxEstimate))
	}
	t, err := s.Trip(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.State == StateTripEnded && t.Fare == fare {
		if err := s.run(ctx, DefinitionPayment, t.PaymentSagaID, &sagaInput{TripID: t.ID, Kind: kindFare, Amount: fare}); err != nil {
			return nil, err
		}
		return s.Trip(ctx, id)
	}
	t, started, err := s.end(ctx, id, fare)
	if err != nil {
		return nil, err
	}
	return s.drive(ctx, t, started)
}

// end moves trip id to trip_ended with fare and writes its payment saga, claimed for drive.
func (s *Service) end(ctx context.Context, id string, fare int64) (*orderly.Trip, *saga.Started, error) {
	return s.move(ctx, id, EventEnd, "", func(t *orderly.Trip, _ orderly.State) (*sagaStart, error) {
		t.Fare, t.PaymentSagaID = fare, t.ID+":payment"
		return &sagaStart{DefinitionPayment, t.PaymentSagaID, &sagaInput{TripID: t.ID, Kind: kindFare, Amount: fare}}, nil
	})
}

// CancelTrip implements orderly.TripService. Rule (docs/flows/ride-hailing.md): cancelling a
// requested trip is free, the hold is voided; after a driver was assigned (driver_assigned,
// in_trip) the cancellation fee, min(Config.CancellationFee, hold), is captured from the
// hold, the rest released, and the fee is settled to the driver and the platform like a
// fare. Both run as the trip's payment saga.
func (s *Service) CancelTrip(ctx context.Context, id string) (*orderly.Trip, error) {
	t, started, err := s.move(ctx, id, orderly.EventCancel, CloseReasonRiderCancelled, func(t *orderly.Trip, from orderly.State) (*sagaStart, error) {
		var fee int64
		if from != StateRequested {
			fee = min(s.cfg.CancellationFee, t.HoldAmount)
		}
		t.CancellationFee, t.PaymentSagaID = fee, t.ID+":payment"
		return &sagaStart{DefinitionPayment, t.PaymentSagaID, &sagaInput{TripID: t.ID, Kind: kindCancellation, Amount: fee}}, nil
	})
	if err != nil {
		return nil, err
	}
	return s.drive(ctx, t, started)
}

// RefundTrip implements orderly.TripService: settled → refunding, and the refund saga
// (saga.go) written, in one transaction; the saga reverses the settlement and refunds the
// card, and the trip ends refunded, or back in settled when the driver's or platform's
// wallet cannot cover the reversal; it can then be asked again (nextRefundSagaID).
func (s *Service) RefundTrip(ctx context.Context, id string) (*orderly.Trip, error) {
	t, started, err := s.refund(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.drive(ctx, t, started)
}

// refund moves trip id to refunding and writes its refund saga, claimed for drive.
func (s *Service) refund(ctx context.Context, id string) (*orderly.Trip, *saga.Started, error) {
	return s.move(ctx, id, EventRefund, "", func(t *orderly.Trip, _ orderly.State) (*sagaStart, error) {
		t.RefundSagaID = nextRefundSagaID(t.ID, t.RefundSagaID)
		return &sagaStart{DefinitionRefund, t.RefundSagaID, &sagaInput{TripID: t.ID}}, nil
	})
}

// nextRefundSagaID is the id of trip id's next refund saga, after prev (the last one; ""
// for none): "<trip id>:refund", then "<trip id>:refund:2", ":3" … A refund whose saga was
// compensated (a wallet could not cover the reversal: the trip went back to settled) can be
// asked again, and each try is a saga of its own with its own idempotency keys.
func nextRefundSagaID(id, prev string) string {
	first := id + ":refund"
	switch prev {
	case "":
		return first
	case first:
		return first + ":2"
	}
	n, err := strconv.Atoi(strings.TrimPrefix(prev, first+":"))
	if err != nil || n < 2 {
		return prev + ":2" // not one of ours: still a new id
	}
	return first + ":" + strconv.Itoa(n+1)
}

// sagaStart is a saga a trip's move writes in its own transaction: the trip's payment or
// refund saga.
type sagaStart struct {
	def, id string
	in      *sagaInput
}

// move fires event on trip id through the flow, applies edit (given the state before) to
// the trip row in the same transaction and returns the trip after it. When edit returns a
// saga, it is written in that transaction too (saga.Orchestrator.StartInTx), so that a
// trip never reaches a state whose saga does not exist; it is returned, claimed, for
// drive. EILLEGAL when the trip's state does not take event; ECONFLICT when it changed
// concurrently.
func (s *Service) move(ctx context.Context, id string, event orderly.Event, reason orderly.CloseReason,
	edit func(t *orderly.Trip, from orderly.State) (*sagaStart, error)) (*orderly.Trip, *saga.Started, error) {
	var (
		t       *orderly.Trip
		started *saga.Started
	)
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		started = nil
		var err error
		if t, err = tx.TripGet(ctx, id); err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		from := t.State
		if t, err = s.transition(ctx, tx, t, event, reason, now, "rider"); err != nil {
			return err
		}
		var start *sagaStart
		if edit != nil {
			if start, err = edit(t, from); err != nil {
				return err
			}
		}
		if err := s.update(ctx, tx, t, now); err != nil || start == nil {
			return err
		}
		started, err = s.cfg.Sagas.StartInTx(ctx, tx, now, &saga.StartParams{Definition: start.def, ID: start.id, Input: start.in.json()})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return t, started, nil
}

// drive runs started, a trip's saga written with its move, in the caller's goroutine and
// returns the trip as the saga left it. A saga not run to its end here (an attempt that
// could not be recorded) is left to the timer, which resumes it when its lease ends.
func (s *Service) drive(ctx context.Context, t *orderly.Trip, started *saga.Started) (*orderly.Trip, error) {
	if _, err := s.cfg.Sagas.Drive(ctx, started); err != nil {
		s.cfg.Logger.Warn("ride: saga not run to its end here; the timer resumes it", "saga_id", started.ID(), "trip_id", t.ID, "error", err)
	}
	return s.Trip(ctx, t.ID)
}

// transition fires event on t in tx; t.State becomes the new state. The caller edits and
// updates t afterwards (update).
func (s *Service) transition(ctx context.Context, tx store.Tx, t *orderly.Trip, event orderly.Event, reason orderly.CloseReason, now time.Time, actor string) (*orderly.Trip, error) {
	from := t.State
	if _, err := s.flow.Next(from, event); err != nil {
		return nil, orderly.Errorf(orderly.EILLEGAL, "trip %s is %s: it does not take %s", t.ID, from, event)
	}
	changed, err := s.cfg.Machine.Transition(ctx, tx, s.flow, &store.OrdersTransitionParams{IDs: []string{t.ID}, From: from,
		Event: event, Now: now, CloseReason: reason, Actor: actor, Cause: "trip " + string(event)}, nil)
	if err != nil {
		return nil, err
	} else if len(changed) != 1 {
		return nil, orderly.Errorf(orderly.ECONFLICT, "trip %s changed concurrently; retry", t.ID)
	}
	t.State, _ = s.flow.Next(from, event)
	if reason != "" {
		t.CloseReason = string(reason)
	}
	return t, nil
}

// update writes t's figures guarded by its version.
func (s *Service) update(ctx context.Context, tx store.Tx, t *orderly.Trip, now time.Time) error {
	t.UpdatedAt = now
	if ok, err := tx.TripUpdate(ctx, t); err != nil {
		return err
	} else if !ok {
		return orderly.Errorf(orderly.ECONFLICT, "trip %s changed concurrently; retry", t.ID)
	}
	return nil
}

// run starts saga id of definition def and runs it in the caller's goroutine; a saga that
// exists already (a repeated request) is left to its runner.
func (s *Service) run(ctx context.Context, def, id string, in *sagaInput) error {
	_, err := s.cfg.Sagas.Run(ctx, &saga.StartParams{Definition: def, ID: id, Input: in.json()})
	switch orderly.ErrorCode(err) {
	case "", orderly.ECONFLICT: // ran, or exists already
		return nil
	case orderly.EINVALID:
		return err
	}
	// Created and left to the timer (an attempt not recorded is due again when its lease
	// ends), or not created: ending the trip again with the same fare creates it.
	s.cfg.Logger.Warn("ride: saga not run to its end here", "saga_id", id, "trip_id", in.TripID, "error", err)
	return nil
}
