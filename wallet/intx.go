package wallet

import (
	"context"
	"errors"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

// DebitTx is Debit in the caller's transaction tx at now (the database clock of tx), for a
// participant whose writes must commit with its own (a saga's LocalTx step, package
// checkout): the same validation, guard and entries, and the same idempotency (a key used
// already returns the first transfer with Replay set, or EIDEMPOTENCY for another
// operation). id is the new transfer's id (a UUID the caller minted, e.g. to name it in a
// payment written before); "" mints one. Errors as Debit; on error the caller rolls tx
// (or its savepoint) back.
func (s *Service) DebitTx(ctx context.Context, tx store.Tx, id string, p *orderly.WalletMoveParams, now time.Time) (*orderly.WalletTransfer, error) {
	if err := validateMove(p); err != nil {
		return nil, err
	}
	user := orderly.UserAccount(p.UserID, p.Currency)
	cp := orderly.SystemAccount(orderly.SystemPlatform, p.Currency)
	if p.Counterparty != nil {
		cp = *p.Counterparty
	}
	if err := validateRef(cp, p.Currency); err != nil {
		return nil, err
	} else if cp.ID() == user.ID() {
		return nil, orderly.Errorf(orderly.EINVALID, "counterparty: must be another account than the user's")
	}
	cp = platformShard(cp, p.IdempotencyKey)
	tr := &orderly.WalletTransfer{Kind: orderly.TransferDebit, IdempotencyKey: p.IdempotencyKey, AccountID: user.ID(),
		CounterpartyID: cp.ID(), Currency: p.Currency, Amount: p.Amount}
	if first, err := replayTx(ctx, tx, tr); first != nil || err != nil {
		return first, err
	}
	if id == "" {
		var err error
		if id, err = order.NewID(); err != nil {
			return nil, err
		}
	}
	tr.ID = id
	if err := book(ctx, tx, tr, now, []leg{
		{account: user.ID(), ref: &user, bucket: orderly.BucketAvailable, amount: -p.Amount},
		{account: cp.ID(), ref: &cp, bucket: orderly.BucketAvailable, amount: p.Amount},
	}); err != nil {
		return nil, inTxError(err, tr)
	}
	return tr, nil
}

// RefundTx is Refund in the caller's transaction tx at now, as DebitTx is Debit. Errors as
// Refund.
func (s *Service) RefundTx(ctx context.Context, tx store.Tx, p *orderly.WalletRefundParams, now time.Time) (*orderly.WalletTransfer, error) {
	switch {
	case !order.ValidID(p.TransferID):
		return nil, orderly.Errorf(orderly.EINVALID, "transfer_id: must be a transfer's id")
	case p.Amount <= 0 || p.Amount > MaxAmount:
		return nil, orderly.Errorf(orderly.EINVALID, "amount: must be 1 to %d minor units", int64(MaxAmount))
	}
	if err := validateKey(p.IdempotencyKey); err != nil {
		return nil, err
	}
	tr := &orderly.WalletTransfer{Kind: orderly.TransferRefund, IdempotencyKey: p.IdempotencyKey, RefundOf: p.TransferID, Amount: p.Amount}
	if first, err := replayTx(ctx, tx, tr); first != nil || err != nil {
		return first, err
	}
	id, err := order.NewID()
	if err != nil {
		return nil, err
	}
	tr.ID = id
	if err := refund(ctx, tx, tr, p, now); err != nil {
		return nil, inTxError(err, tr)
	}
	return tr, nil
}

// replayTx returns the transfer written under tr's key in tx, with Replay set, when it is
// the same operation; EIDEMPOTENCY when it is another; nil, nil when the key is new.
func replayTx(ctx context.Context, tx store.Tx, tr *orderly.WalletTransfer) (*orderly.WalletTransfer, error) {
	first, err := tx.WalletTransferByKey(ctx, tr.IdempotencyKey)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if first.Kind != tr.Kind || first.Amount != tr.Amount || tr.AccountID != "" && first.AccountID != tr.AccountID ||
		tr.RefundOf != first.RefundOf || tr.CounterpartyID != "" && first.CounterpartyID != tr.CounterpartyID {
		return nil, orderly.Errorf(orderly.EIDEMPOTENCY, "idempotency key %q was used for another operation (a %s of %d)",
			tr.IdempotencyKey, first.Kind, first.Amount)
	}
	first.Replay = true
	return first, nil
}

// inTxError turns errReplay (a concurrent transaction took the key between the look-up
// and the insert) into ECONFLICT: retry, and the retry answers the replay.
func inTxError(err error, tr *orderly.WalletTransfer) error {
	if errors.Is(err, errReplay) {
		return orderly.Errorf(orderly.ECONFLICT, "idempotency key %q was taken concurrently; retry", tr.IdempotencyKey)
	}
	return err
}
