package ride

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"

	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
)

// Saga definitions of trips (docs/flows/ride-hailing.md).
const (
	// DefinitionPayment collects a trip's fare (or its cancellation fee, or voids its hold)
	// and settles it: capture → extra → record → settle → settled.
	DefinitionPayment = "ride_payment"
	// DefinitionRefund refunds a settled trip: begin → reverse → refund → refunded.
	DefinitionRefund = "ride_refund"
)

// Kinds of payment sagas (sagaInput.Kind).
const (
	kindFare         = "fare"         // at trip end: trip_ended → paid → settled
	kindCancellation = "cancellation" // at cancel: the fee (0: a void) of a closed trip
)

// sagaInput is the input of the trips' sagas: the trip, and for a payment what to collect.
type sagaInput struct {
	TripID string `json:"trip_id"`
	Kind   string `json:"kind,omitempty"`
	Amount int64  `json:"amount,omitempty"` // minor units: the fare or the cancellation fee
}

func (in *sagaInput) json() json.RawMessage {
	b, _ := json.Marshal(in) // strings and integers always marshal
	return b
}

func input(c *saga.Call) (*sagaInput, error) {
	var in sagaInput
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return nil, saga.Business(fmt.Errorf("saga %s: input: %w", c.SagaID, err))
	}
	return &in, nil
}

// split returns what a collection of amount takes from a hold of hold: captured from the
// hold (never more than it), released back, and extra, charged as a second payment.
func split(hold, amount int64) (captured, released, extra int64) {
	captured = min(amount, hold)
	return captured, hold - captured, amount - captured
}

// extraHoldID is the id of the second payment of a trip whose fare is above its hold: a
// hold authorised and captured at once.
func extraHoldID(t *orderly.Trip) string { return t.HoldID + "/extra" }

// Definitions returns the trips' saga definitions for the orchestrator (saga.Config).
//
// The payment saga's steps:
//   - capture (gateway): capture min(amount, hold) of the hold under the step's key, the rest
//     released in the same call; amount 0 voids it. A lost reply is retried with the same key
//     and the gateway answers the first capture: never twice. A hold that expired (the
//     gateway's clock decides, even before it processed the expiry) is a business failure:
//     the trip is flagged for collection (collection_due = amount) and stays as it is.
//     Compensation: refund what the hold captured, or void it if still pending, and flag
//     the trip, which then paid nothing, for collection of the amount.
//   - extra (gateway): the rule for a fare above the hold: the hold is captured in full
//     (never more) and the difference is charged as a second payment, a hold of that
//     amount authorised and captured at once. Compensation: refund or void it.
//   - record (in the saga's transaction): trip_ended → paid (a fare), and the figures.
//   - settle (wallet): credits the driver amount − platform fee and the platform its fee,
//     from outside the ledger (the card money enters it); retried for a day (forward
//     recovery past the pivot, record). Compensation: debits them back.
//   - settled (in the saga's transaction): paid → settled.
func (s *Service) Definitions() []saga.Definition {
	gw := 5 * time.Second
	return []saga.Definition{{
		Name: DefinitionPayment,
		Steps: []saga.Step{
			{Name: "capture", Action: saga.Local(s.capture), Compensation: saga.Local(s.uncapture), Timeout: gw},
			{Name: "extra", Action: saga.Local(s.chargeExtra), Compensation: saga.Local(s.unchargeExtra), Timeout: gw},
			{Name: "record", Action: saga.LocalTx(s.recordPaid)},
			// After record the rider has paid: the settlement goes forward. A transient failure
			// (a killed instance, a lock timeout on a hot ledger row) is retried for a day rather
			// than compensated after the default deadline, which refunded the rider's card while
			// the trip stayed paid.
			{Name: "settle", Action: saga.Local(s.settle), Compensation: saga.Local(s.unsettle), Timeout: gw,
				Retry: saga.RetryPolicy{Deadline: 24 * time.Hour}},
			{Name: "settled", Action: saga.LocalTx(s.recordSettled)},
		},
	}, {
		Name: DefinitionRefund,
		Steps: []saga.Step{
			{Name: "begin", Action: saga.LocalTx(func(context.Context, store.Tx, *saga.Call) error { return nil }),
				Compensation: saga.LocalTx(s.refundFailed)},
			{Name: "reverse", Action: saga.Local(s.reverse), Compensation: saga.Local(s.unreverse), Timeout: gw},
			// A refund is retried for a day: its outcome must not become unknown while the
			// settlement it follows is compensated.
			{Name: "refund", Action: saga.Local(s.refundCard), Timeout: gw, Retry: saga.RetryPolicy{Deadline: 24 * time.Hour}},
			{Name: "refunded", Action: saga.LocalTx(s.recordRefunded)},
		},
	}}
}

// load reads the call's input and trip.
func (s *Service) load(ctx context.Context, c *saga.Call) (*sagaInput, *orderly.Trip, error) {
	in, err := input(c)
	if err != nil {
		return nil, nil, err
	}
	t, err := s.Trip(ctx, in.TripID)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return nil, nil, saga.Business(err)
	}
	return in, t, err
}

// loadTx is load for a LocalTx step: the call's input, its trip read in tx and the
// database's now.
func loadTx(ctx context.Context, tx store.Tx, c *saga.Call) (*sagaInput, *orderly.Trip, time.Time, error) {
	in, err := input(c)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	t, err := tx.TripGet(ctx, in.TripID)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	now, err := tx.Now(ctx)
	return in, t, now, err
}

// gatewayOutcome classifies a gateway error: a domain refusal is a business failure, the
// rest (a lost reply, an injected failure) transient.
func gatewayOutcome(err error) error {
	if err == nil || errors.Is(err, orderly.ErrGatewayTimeout) {
		return err
	}
	if code := orderly.ErrorCode(err); code != "" && code != orderly.EINTERNAL && code != orderly.EUNAVAILABLE {
		return saga.Business(err)
	}
	return err
}

func (s *Service) capture(ctx context.Context, c *saga.Call) error {
	in, t, err := s.load(ctx, c)
	if err != nil {
		return err
	}
	if in.Amount == 0 {
		_, err = s.cfg.Gateway.VoidHold(ctx, t.HoldID, c.IdempotencyKey)
		if orderly.ErrorCode(err) == orderly.EHOLDEXPIRED {
			return nil // released by its expiry
		}
		return gatewayOutcome(err)
	}
	captured, _, _ := split(t.HoldAmount, in.Amount)
	_, err = s.cfg.Gateway.CaptureHold(ctx, t.HoldID, c.IdempotencyKey, captured)
	if orderly.ErrorCode(err) == orderly.EHOLDEXPIRED {
		if ferr := s.flagCollection(ctx, t.ID, in.Amount); ferr != nil {
			return ferr // transient: flagged on the retry, which is refused the same way
		}
	}
	return gatewayOutcome(err)
}

// flagCollection records that amount of trip id could not be charged (0: nothing was to
// be), and that its hold went back to the card (expired, voided, or its capture refunded):
// released = held − captured, so that the hold ends accounted.
func (s *Service) flagCollection(ctx context.Context, id string, amount int64) error {
	return s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		t, err := tx.TripGet(ctx, id)
		if err != nil {
			return err
		}
		released := releaseRest(t)
		if t.CollectionDue == amount && !released {
			return nil
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		t.CollectionDue = amount
		return s.update(ctx, tx, t, now)
	})
}

// undoHold refunds what hold id captured, or voids it while pending, under key; nothing
// when it expired, was voided or does not exist (null compensation). The hold is this
// saga's alone: only the trip's payment saga captures or voids it.
func (s *Service) undoHold(ctx context.Context, id, key string) error {
	h, err := s.cfg.Gateway.Hold(ctx, id)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return nil
	} else if err != nil {
		return err
	}
	switch h.State {
	case orderly.HoldPosted:
		return gatewayOutcome(s.cfg.Gateway.RefundHold(ctx, id, key, h.Captured))
	case orderly.HoldPending:
		_, err := s.cfg.Gateway.VoidHold(ctx, id, key)
		if c := orderly.ErrorCode(err); c == orderly.EHOLDEXPIRED {
			return nil
		}
		return gatewayOutcome(err)
	}
	return nil
}

// uncapture compensates capture: the hold's capture is refunded (or the hold voided), and
// the trip, which then paid nothing, is flagged for collection of the amount
// (collection_due), as a capture refused by an expired hold is. Without the flag a capture
// whose outcome stayed unknown past its deadline (a gateway down for a minute) or a refused
// extra charge left a trip_ended trip unpaid and unflagged: a free ride nobody saw.
func (s *Service) uncapture(ctx context.Context, c *saga.Call) error {
	in, t, err := s.load(ctx, c)
	if err != nil {
		return err
	}
	if err := s.undoHold(ctx, t.HoldID, c.IdempotencyKey); err != nil {
		return err
	}
	// A void (amount 0: a free cancellation) that was compensated released the hold too.
	if t.State == StateTripEnded || t.State == orderly.StateClosed {
		return s.flagCollection(ctx, t.ID, in.Amount)
	}
	return nil
}

func (s *Service) chargeExtra(ctx context.Context, c *saga.Call) error {
	in, t, err := s.load(ctx, c)
	if err != nil {
		return err
	}
	_, _, extra := split(t.HoldAmount, in.Amount)
	if extra == 0 {
		return nil
	}
	id := extraHoldID(t)
	if _, err := s.cfg.Gateway.Authorize(ctx, id, extra, s.cfg.HoldTTL); err != nil {
		return gatewayOutcome(err)
	}
	_, err = s.cfg.Gateway.CaptureHold(ctx, id, c.IdempotencyKey, extra)
	return gatewayOutcome(err)
}

func (s *Service) unchargeExtra(ctx context.Context, c *saga.Call) error {
	_, t, err := s.load(ctx, c)
	if err != nil {
		return err
	}
	return s.undoHold(ctx, extraHoldID(t), c.IdempotencyKey)
}

// fees splits what the rider paid: the platform's fee (rounded down) and the driver's payout.
func (s *Service) fees(paid int64) (platform, driver int64) {
	platform = paid * s.cfg.PlatformFeePercent / 100
	return platform, paid - platform
}

func (s *Service) recordPaid(ctx context.Context, tx store.Tx, c *saga.Call) error {
	in, t, now, err := loadTx(ctx, tx, c)
	if err != nil {
		return err
	}
	if in.Kind == kindFare {
		if t, err = s.transition(ctx, tx, t, orderly.EventPay, "", now, "saga"); err != nil {
			return err
		}
	}
	t.Captured, t.Released, t.ExtraCharged = split(t.HoldAmount, in.Amount)
	t.PlatformFee, t.DriverPayout = s.fees(in.Amount)
	t.CollectionDue = 0
	return s.update(ctx, tx, t, now)
}

// credit is one settlement credit: amount to a role account under key.
type credit struct {
	account orderly.AccountRef
	amount  int64
	key     string
}

// DriverAccount returns the role account of driver id's payouts in currency,
// "role:<currency>:driver:<id>": a buyer naming the driver's id reaches another account.
func DriverAccount(id, currency string) orderly.AccountRef {
	return orderly.RoleAccount("driver:"+id, currency)
}

// PlatformAccount returns the role account of the platform's fees in currency,
// "role:<currency>:<Config.PlatformAccount>".
func (s *Service) PlatformAccount(currency string) orderly.AccountRef {
	return orderly.RoleAccount(s.cfg.PlatformAccount, currency)
}

// credits returns the settlement credits of t whose action key is key (the settle step's).
func (s *Service) credits(t *orderly.Trip, key string) []credit {
	var out []credit
	if t.DriverPayout > 0 && t.DriverID != "" {
		out = append(out, credit{DriverAccount(t.DriverID, t.Currency), t.DriverPayout, key + "/driver"})
	}
	if t.PlatformFee > 0 {
		out = append(out, credit{s.PlatformAccount(t.Currency), t.PlatformFee, key + "/platform"})
	}
	return out
}

// walletOutcome classifies a wallet error: a domain refusal is a business failure.
func walletOutcome(err error) error {
	if code := orderly.ErrorCode(err); err != nil && code != orderly.EINTERNAL && code != orderly.EUNAVAILABLE && code != orderly.ECONFLICT {
		return saga.Business(err)
	}
	return err
}

func (s *Service) settle(ctx context.Context, c *saga.Call) error {
	return s.moveSettlement(ctx, c, s.cfg.Wallets.Credit)
}

// moveSettlement moves each settlement leg of the trip (the driver's payout, the platform's
// fee) with move (a credit to settle, a debit to reverse) under the call's keys, after the
// a wallet's refusal is a business failure (walletOutcome).
func (s *Service) moveSettlement(ctx context.Context, c *saga.Call,
	move func(context.Context, *orderly.WalletMoveParams) (*orderly.WalletTransfer, error)) error {
	_, t, err := s.load(ctx, c)
	if err != nil {
		return err
	}
	external := orderly.SystemAccount(orderly.SystemExternal, t.Currency)
	for _, cr := range s.credits(t, c.IdempotencyKey) {
		if _, err := move(ctx, &orderly.WalletMoveParams{Account: &cr.account, Currency: t.Currency,
			Amount: cr.amount, Counterparty: &external, IdempotencyKey: cr.key}); err != nil {
			return walletOutcome(err)
		}
	}
	return nil
}

// unsettle debits the settlement credits back. Each credit is first made sure of with its
// own key (a replay when it was made, the credit now when it was not), so the debit never
// takes money the credit did not give: credit and debit cancel out either way.
func (s *Service) unsettle(ctx context.Context, c *saga.Call) error {
	_, t, err := s.load(ctx, c)
	if err != nil {
		return err
	}
	external := orderly.SystemAccount(orderly.SystemExternal, t.Currency)
	actionKey := saga.IdempotencyKey(c.SagaID, c.StepName, saga.PhaseAction)
	for _, cr := range s.credits(t, actionKey) {
		if _, err := s.cfg.Wallets.Credit(ctx, &orderly.WalletMoveParams{Account: &cr.account, Currency: t.Currency,
			Amount: cr.amount, Counterparty: &external, IdempotencyKey: cr.key}); err != nil {
			return err
		}
		if _, err := s.cfg.Wallets.Debit(ctx, &orderly.WalletMoveParams{Account: &cr.account, Currency: t.Currency,
			Amount: cr.amount, Counterparty: &external, IdempotencyKey: c.IdempotencyKey + cr.key[len(actionKey):]}); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) recordSettled(ctx context.Context, tx store.Tx, c *saga.Call) error {
	in, t, now, err := loadTx(ctx, tx, c)
	if err != nil || in.Kind != kindFare {
		return err
	}
	if t, err = s.transition(ctx, tx, t, EventSettle, "", now, "saga"); err != nil {
		return err
	}
	return s.update(ctx, tx, t, now)
}

func (s *Service) refundFailed(ctx context.Context, tx store.Tx, c *saga.Call) error {
	_, t, now, err := loadTx(ctx, tx, c)
	if err != nil || t.State != StateRefunding {
		return err
	}
	if t, err = s.transition(ctx, tx, t, EventRefundFail, "", now, "saga"); err != nil {
		return err
	}
	return s.update(ctx, tx, t, now)
}

// reverse debits the settlement credits back: the driver's payout and the platform's fee.
// A wallet that no longer holds them refuses (EINSUFFICIENT): a business failure, the
// refund is not made and the trip goes back to settled.
func (s *Service) reverse(ctx context.Context, c *saga.Call) error {
	return s.moveSettlement(ctx, c, s.cfg.Wallets.Debit)
}

// unreverse credits back what reverse debited: each debit is first made sure of with its
// own key; a debit the wallet refuses (EINSUFFICIENT) was not made and needs nothing.
func (s *Service) unreverse(ctx context.Context, c *saga.Call) error {
	_, t, err := s.load(ctx, c)
	if err != nil {
		return err
	}
	external := orderly.SystemAccount(orderly.SystemExternal, t.Currency)
	actionKey := saga.IdempotencyKey(c.SagaID, c.StepName, saga.PhaseAction)
	for _, cr := range s.credits(t, actionKey) {
		_, err := s.cfg.Wallets.Debit(ctx, &orderly.WalletMoveParams{Account: &cr.account, Currency: t.Currency,
			Amount: cr.amount, Counterparty: &external, IdempotencyKey: cr.key})
		if orderly.ErrorCode(err) == orderly.EINSUFFICIENT {
			continue
		} else if err != nil {
			return err
		}
		if _, err := s.cfg.Wallets.Credit(ctx, &orderly.WalletMoveParams{Account: &cr.account, Currency: t.Currency,
			Amount: cr.amount, Counterparty: &external, IdempotencyKey: c.IdempotencyKey + cr.key[len(actionKey):]}); err != nil {
			return err
		}
	}
	return nil
}

// cardRefundKey is the idempotency key of trip t's card refund: the first refund saga's
// refund step's, whichever try of the refund runs it. A trip is refunded in full at most
// once, and a try whose refund step's outcome stayed unknown (then compensated: the trip
// went back to settled) may have refunded the card: the next try, under the same key, is
// answered that refund instead of being refused as exceeding what was captured.
func cardRefundKey(t *orderly.Trip) string {
	return saga.IdempotencyKey(nextRefundSagaID(t.ID, ""), "refund", saga.PhaseAction)
}

func (s *Service) refundCard(ctx context.Context, c *saga.Call) error {
	_, t, err := s.load(ctx, c)
	if err != nil {
		return err
	}
	key := cardRefundKey(t)
	if t.Captured > 0 {
		if err := s.cfg.Gateway.RefundHold(ctx, t.HoldID, key, t.Captured); err != nil {
			return err
		}
	}
	if t.ExtraCharged > 0 {
		if err := s.cfg.Gateway.RefundHold(ctx, extraHoldID(t), key+"/extra", t.ExtraCharged); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) recordRefunded(ctx context.Context, tx store.Tx, c *saga.Call) error {
	_, t, now, err := loadTx(ctx, tx, c)
	if err != nil {
		return err
	}
	if t, err = s.transition(ctx, tx, t, EventRefundComplete, "", now, "saga"); err != nil {
		return err
	}
	t.Refunded = t.Captured + t.ExtraCharged
	return s.update(ctx, tx, t, now)
}
