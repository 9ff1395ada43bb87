package wallet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

// Limits of wallet operations.
const (
	// MaxAmount caps one operation's amount (minor units): far from int64 overflow however
	// many operations add up on one account.
	MaxAmount = orderly.MaxAmount
	// MaxHoldTTL caps how long a hold may stay pending, as card pre-authorisations expire
	// after days, not months.
	MaxHoldTTL = 30 * 24 * time.Hour
	// MaxKeyLength caps an idempotency key, in bytes.
	MaxKeyLength = 255
	// DefaultPageSize and MaxPageSize bound a page of entries (orderly.WalletEntriesPage).
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// Config configures a Service.
type Config struct {
	Store store.Store
	// Signals is told of each hold committed with its expiry (the timers of this instance
	// and the others re-arm for it); nil drops them.
	Signals orderly.Signals
	Logger  *slog.Logger
}

// Service implements orderly.WalletService over a store.
type Service struct {
	cfg Config
}

var _ orderly.WalletService = (*Service)(nil)

// NewService returns a Service; it returns an error when cfg has no Store.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("wallet: Config.Store is required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	return &Service{cfg: cfg}, nil
}

// errReplay says, inside a transaction, that the operation's idempotency key was used
// already: the transaction rolls back and the first operation's result is returned.
var errReplay = errors.New("wallet: idempotency key used already")

// leg is one entry to book: amount (minor units, either sign) of one account's bucket.
// ref is set when the account may have to be created (it receives money).
type leg struct {
	account string
	ref     *orderly.AccountRef
	bucket  orderly.Bucket
	amount  int64
}

// Credit implements orderly.WalletService: Amount moves from the counterparty
// (SystemExternal by default: a top-up) to the user's available balance; the user's
// account is created on its first credit. Errors: EINVALID, EINSUFFICIENT (a user
// counterparty lacks the money), EIDEMPOTENCY.
func (s *Service) Credit(ctx context.Context, p *orderly.WalletMoveParams) (*orderly.WalletTransfer, error) {
	return s.move(ctx, p, orderly.TransferCredit, orderly.SystemExternal)
}

// Debit implements orderly.WalletService: Amount moves from the user's available balance
// to the counterparty (SystemPlatform by default: one of its shards, PlatformShards), only
// if the balance covers it, whatever runs concurrently (one guarded UPDATE). Errors: EINVALID, ENOTFOUND (the user has no
// wallet in Currency), EINSUFFICIENT, EIDEMPOTENCY.
func (s *Service) Debit(ctx context.Context, p *orderly.WalletMoveParams) (*orderly.WalletTransfer, error) {
	return s.move(ctx, p, orderly.TransferDebit, orderly.SystemPlatform)
}

func (s *Service) move(ctx context.Context, p *orderly.WalletMoveParams, kind orderly.TransferKind, system string) (*orderly.WalletTransfer, error) {
	if err := validateMove(p); err != nil {
		return nil, err
	}
	user := orderly.UserAccount(p.UserID, p.Currency)
	if p.Account != nil {
		user = *p.Account
	}
	cp := orderly.SystemAccount(system, p.Currency)
	if p.Counterparty != nil {
		cp = *p.Counterparty
	}
	if err := validateRef(cp, p.Currency); err != nil {
		return nil, err
	} else if cp.ID() == user.ID() {
		return nil, orderly.Errorf(orderly.EINVALID, "counterparty: must be another account than the user's")
	}
	cp = platformShard(cp, p.IdempotencyKey)
	tr := &orderly.WalletTransfer{Kind: kind, IdempotencyKey: p.IdempotencyKey, AccountID: user.ID(), CounterpartyID: cp.ID(),
		Currency: p.Currency, Amount: p.Amount}
	from, to := cp, user
	if kind == orderly.TransferDebit {
		from, to = user, cp
	}
	return s.run(ctx, tr, func(ctx context.Context, tx store.Tx, now time.Time) error {
		return book(ctx, tx, tr, now, []leg{
			{account: from.ID(), ref: &from, bucket: orderly.BucketAvailable, amount: -p.Amount},
			{account: to.ID(), ref: &to, bucket: orderly.BucketAvailable, amount: p.Amount},
		})
	})
}

// Hold implements orderly.WalletService: Amount moves from the user's available balance to
// held, only if the balance covers it, until it is posted, voided or expired at now + TTL
// (database clock, truncated to the millisecond). The expiry is a timed state of the
// closer (Expiries). Errors: EINVALID, ENOTFOUND, EINSUFFICIENT, EIDEMPOTENCY.
func (s *Service) Hold(ctx context.Context, p *orderly.WalletHoldParams) (*orderly.WalletHold, *orderly.WalletTransfer, error) {
	if err := validateMove(&orderly.WalletMoveParams{UserID: p.UserID, Currency: p.Currency, Amount: p.Amount,
		IdempotencyKey: p.IdempotencyKey}); err != nil {
		return nil, nil, err
	}
	ttl := p.TTL.Truncate(time.Millisecond)
	if ttl <= 0 || ttl > MaxHoldTTL {
		return nil, nil, orderly.Errorf(orderly.EINVALID, "ttl: must be 1 ms to %s", MaxHoldTTL)
	}
	user := orderly.UserAccount(p.UserID, p.Currency)
	tr := &orderly.WalletTransfer{Kind: orderly.TransferHold, IdempotencyKey: p.IdempotencyKey, AccountID: user.ID(),
		Currency: p.Currency, Amount: p.Amount}
	var hold *orderly.WalletHold
	out, err := s.run(ctx, tr, func(ctx context.Context, tx store.Tx, now time.Time) error {
		tr.HoldID = tr.ID
		if err := book(ctx, tx, tr, now, []leg{
			{account: user.ID(), bucket: orderly.BucketAvailable, amount: -p.Amount},
			{account: user.ID(), bucket: orderly.BucketHeld, amount: p.Amount},
		}); err != nil {
			return err
		}
		hold = &orderly.WalletHold{ID: tr.ID, AccountID: user.ID(), Currency: p.Currency, Amount: p.Amount,
			State: orderly.HoldPending, ExpiresAt: now.Add(ttl), CreatedAt: now}
		return tx.WalletHoldInsert(ctx, hold)
	})
	if err != nil {
		return nil, nil, err
	}
	if out.Replay {
		hold, err = s.GetHold(ctx, out.HoldID)
		return hold, out, err
	}
	s.cfg.Signals.Deadline(ctx, hold.ExpiresAt)
	return hold, out, nil
}

// Post implements orderly.WalletService: it captures Amount (1 … the hold's amount) of a
// pending hold to the counterparty (SystemPlatform by default: one of its shards,
// PlatformShards) and releases the rest to
// the user's available balance, in one transfer, with the hold row locked. The rule of
// this primitive is that a hold is never over-captured: a larger amount is refused
// (EHOLDEXCEEDED) and changes nothing, the hold stays pending; a flow that may charge more
// than it held captures the hold and charges the difference as a separate debit, or
// refuses, by a rule of its own.
//
// The database clock decides expiry: a post at or after expires_at is refused
// (EHOLDEXPIRED) even when the closer has not expired the hold yet; then that same call
// expires it (releasing the amount once) and commits, so the closer later finds nothing.
// Errors: EINVALID, ENOTFOUND, EHOLDEXCEEDED, EHOLDEXPIRED, EHOLDNOTPENDING (posted or
// voided already, under another key), EINSUFFICIENT (never for a system counterparty),
// EIDEMPOTENCY.
func (s *Service) Post(ctx context.Context, p *orderly.WalletPostParams) (*orderly.WalletHold, *orderly.WalletTransfer, error) {
	switch {
	case !order.ValidID(p.HoldID):
		return nil, nil, orderly.Errorf(orderly.EINVALID, "hold_id: must be a hold's id")
	case !orderly.ValidAmount(p.Amount):
		return nil, nil, orderly.Errorf(orderly.EINVALID, "amount: %s", orderly.AmountRule)
	}
	if err := validateKey(p.IdempotencyKey); err != nil {
		return nil, nil, err
	}
	tr := &orderly.WalletTransfer{Kind: orderly.TransferPost, IdempotencyKey: p.IdempotencyKey, HoldID: p.HoldID, Amount: p.Amount}
	return s.resolve(ctx, tr, func(ctx context.Context, tx store.Tx, h *orderly.WalletHold, now time.Time) error {
		cp := orderly.SystemAccount(orderly.SystemPlatform, h.Currency)
		if p.Counterparty != nil {
			cp = *p.Counterparty
		}
		if err := validateRef(cp, h.Currency); err != nil {
			return err
		} else if cp.ID() == h.AccountID {
			return orderly.Errorf(orderly.EINVALID, "counterparty: must be another account than the hold's")
		}
		cp = platformShard(cp, p.IdempotencyKey)
		if p.Amount > h.Amount {
			return orderly.Errorf(orderly.EHOLDEXCEEDED, "hold %s holds %d; a capture of %d is more", h.ID, h.Amount, p.Amount)
		}
		tr.CounterpartyID = cp.ID()
		if ok, err := tx.WalletHoldResolve(ctx, &store.WalletHoldResolveParams{ID: h.ID, To: orderly.HoldPosted,
			Captured: p.Amount, At: now}); err != nil || !ok {
			return cmp.Or(err, fmt.Errorf("post hold %s: the locked pending hold did not change", h.ID))
		}
		h.State, h.Captured, h.ResolvedAt = orderly.HoldPosted, p.Amount, &now
		legs := []leg{
			{account: h.AccountID, bucket: orderly.BucketHeld, amount: -h.Amount},
			{account: cp.ID(), ref: &cp, bucket: orderly.BucketAvailable, amount: p.Amount},
		}
		if rest := h.Amount - p.Amount; rest > 0 {
			legs = append(legs, leg{account: h.AccountID, bucket: orderly.BucketAvailable, amount: rest})
		}
		return book(ctx, tx, tr, now, legs)
	})
}

// Void implements orderly.WalletService: it releases a pending hold in full, with the
// hold row locked. At or after expires_at it is refused EHOLDEXPIRED and expires the hold,
// as Post does. Errors: EINVALID, ENOTFOUND, EHOLDEXPIRED, EHOLDNOTPENDING, EIDEMPOTENCY.
func (s *Service) Void(ctx context.Context, holdID, key string) (*orderly.WalletHold, *orderly.WalletTransfer, error) {
	if !order.ValidID(holdID) {
		return nil, nil, orderly.Errorf(orderly.EINVALID, "hold_id: must be a hold's id")
	}
	if err := validateKey(key); err != nil {
		return nil, nil, err
	}
	tr := &orderly.WalletTransfer{Kind: orderly.TransferVoid, IdempotencyKey: key, HoldID: holdID}
	return s.resolve(ctx, tr, func(ctx context.Context, tx store.Tx, h *orderly.WalletHold, now time.Time) error {
		tr.Amount = h.Amount
		if ok, err := tx.WalletHoldResolve(ctx, &store.WalletHoldResolveParams{ID: h.ID, To: orderly.HoldVoided, At: now}); err != nil || !ok {
			return cmp.Or(err, fmt.Errorf("void hold %s: the locked pending hold did not change", h.ID))
		}
		h.State, h.ResolvedAt = orderly.HoldVoided, &now
		return book(ctx, tx, tr, now, releaseLegs(h))
	})
}

// resolve runs a post or a void of hold tr.HoldID: it locks the hold, answers a replay of
// tr's key, refuses a hold that is not pending, expires (and refuses) one whose expiry
// passed on the database clock, and else runs fn, which changes the hold and books tr.
func (s *Service) resolve(ctx context.Context, tr *orderly.WalletTransfer,
	fn func(ctx context.Context, tx store.Tx, h *orderly.WalletHold, now time.Time) error) (*orderly.WalletHold, *orderly.WalletTransfer, error) {
	var (
		refused  error
		resolved *orderly.WalletHold // the hold as fn left it
	)
	out, err := s.run(ctx, tr, func(ctx context.Context, tx store.Tx, now time.Time) error {
		refused, resolved = nil, nil
		h, err := tx.WalletHoldLock(ctx, tr.HoldID)
		if err != nil {
			return err
		}
		tr.AccountID, tr.Currency = h.AccountID, h.Currency
		if h.State != orderly.HoldPending {
			if _, err := tx.WalletTransferByKey(ctx, tr.IdempotencyKey); err == nil {
				return errReplay
			} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
				return err
			}
			if h.State == orderly.HoldExpired {
				return orderly.Errorf(orderly.EHOLDEXPIRED, "hold %s expired at %s", h.ID, stamp(h.ExpiresAt))
			}
			return orderly.Errorf(orderly.EHOLDNOTPENDING, "hold %s is %s already", h.ID, h.State)
		}
		if !now.Before(h.ExpiresAt) {
			// The deadline passed on the database clock: refuse, and release the amount
			// now, once (the closer, coming later, finds the hold resolved).
			if _, err := expire(ctx, tx, h, now); err != nil {
				return err
			}
			refused = orderly.Errorf(orderly.EHOLDEXPIRED, "hold %s expired at %s", h.ID, stamp(h.ExpiresAt))
			return nil
		}
		if err := fn(ctx, tx, h, now); err != nil {
			return err
		}
		resolved = h
		return nil
	})
	if err != nil {
		return nil, nil, err
	} else if refused != nil {
		return nil, nil, refused
	} else if !out.Replay {
		return resolved, out, nil
	}
	h, err := s.GetHold(ctx, out.HoldID)
	return h, out, err
}

// Refund implements orderly.WalletService: Amount of a debit or a post moves back from its
// counterparty to its user account's available balance; the refunds of one transfer never
// add up to more than its amount (one guarded UPDATE on the refunded transfer). Errors:
// EINVALID (not a debit or post), ENOTFOUND, EREFUNDEXCEEDS, EINSUFFICIENT (a user
// counterparty spent the money), EIDEMPOTENCY.
func (s *Service) Refund(ctx context.Context, p *orderly.WalletRefundParams) (*orderly.WalletTransfer, error) {
	switch {
	case !order.ValidID(p.TransferID):
		return nil, orderly.Errorf(orderly.EINVALID, "transfer_id: must be a transfer's id")
	case !orderly.ValidAmount(p.Amount):
		return nil, orderly.Errorf(orderly.EINVALID, "amount: %s", orderly.AmountRule)
	}
	if err := validateKey(p.IdempotencyKey); err != nil {
		return nil, err
	}
	tr := &orderly.WalletTransfer{Kind: orderly.TransferRefund, IdempotencyKey: p.IdempotencyKey, RefundOf: p.TransferID, Amount: p.Amount}
	return s.run(ctx, tr, func(ctx context.Context, tx store.Tx, now time.Time) error {
		return refund(ctx, tx, tr, p, now)
	})
}

// refund books tr, a refund of p.Amount of transfer p.TransferID, in tx.
func refund(ctx context.Context, tx store.Tx, tr *orderly.WalletTransfer, p *orderly.WalletRefundParams, now time.Time) error {
	orig, err := tx.WalletTransferGet(ctx, p.TransferID)
	if err != nil {
		return err
	}
	if orig.Kind != orderly.TransferDebit && orig.Kind != orderly.TransferPost {
		return orderly.Errorf(orderly.EINVALID, "transfer %s is a %s: only debits and posts are refunded", orig.ID, orig.Kind)
	}
	tr.AccountID, tr.CounterpartyID, tr.Currency = orig.AccountID, orig.CounterpartyID, orig.Currency
	// The transfer row first (its key), then the refunded transfer, then the accounts:
	// the lock order of store.WalletTx.
	tr.CreatedAt = now
	if err := insertTransfer(ctx, tx, tr); err != nil {
		return err
	}
	if ok, err := tx.WalletTransferAddRefunded(ctx, orig.ID, p.Amount); err != nil {
		return err
	} else if !ok {
		return orderly.Errorf(orderly.EREFUNDEXCEEDS, "transfer %s moved %d, %d of it refunded already: %d more is too much",
			orig.ID, orig.Amount, orig.Refunded, p.Amount)
	}
	return moveLegs(ctx, tx, tr, now, []leg{
		{account: orig.CounterpartyID, bucket: orderly.BucketAvailable, amount: -p.Amount},
		{account: orig.AccountID, bucket: orderly.BucketAvailable, amount: p.Amount},
	})
}

// Wallet implements orderly.WalletService.
func (s *Service) Wallet(ctx context.Context, userID, currency string, page *orderly.WalletEntriesPage) (*orderly.Wallet, error) {
	if !order.ValidID(userID) {
		return nil, orderly.Errorf(orderly.EINVALID, "user_id: must be 1–128 bytes of UTF-8 without control characters")
	} else if currency != "" && !orderly.ValidCurrency(currency) {
		return nil, orderly.Errorf(orderly.EINVALID, "currency: must be an ISO 4217 code of a currency of money")
	}
	if page == nil {
		page = &orderly.WalletEntriesPage{}
	}
	limit := cmp.Or(page.Limit, DefaultPageSize)
	if limit < 0 || limit > MaxPageSize {
		return nil, orderly.Errorf(orderly.EINVALID, "limit: must be 1 to %d, got %d", MaxPageSize, limit)
	} else if page.BeforeID < 0 {
		return nil, orderly.Errorf(orderly.EINVALID, "before: must be an entry id, got %d", page.BeforeID)
	}
	var w orderly.Wallet
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		w = orderly.Wallet{}
		id := orderly.UserAccount(userID, currency).ID()
		if currency == "" {
			accounts, err := tx.WalletAccountList(ctx, &store.WalletAccountListParams{Owner: userID, Limit: MaxPageSize})
			if err != nil {
				return err
			}
			accounts = slices.DeleteFunc(accounts, func(a *orderly.WalletAccount) bool { return a.Kind != orderly.AccountUser })
			switch len(accounts) {
			case 0:
				return orderly.Errorf(orderly.ENOTFOUND, "user %s has no wallet", userID)
			case 1:
				id = accounts[0].ID
			default:
				return orderly.Errorf(orderly.EINVALID, "currency: user %s has wallets in several currencies; name one", userID)
			}
		}
		a, err := tx.WalletAccountGet(ctx, id)
		if err != nil {
			return err
		}
		entries, err := tx.WalletEntryList(ctx, &store.WalletEntryListParams{AccountID: id, BeforeID: page.BeforeID, Limit: limit + 1})
		if err != nil {
			return err
		}
		if len(entries) > limit {
			entries = entries[:limit]
			w.NextBeforeID = entries[limit-1].ID
		}
		w.Account, w.Entries = a, entries
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wallet of %s: %w", userID, err)
	}
	return &w, nil
}

// Account implements orderly.WalletService.
func (s *Service) Account(ctx context.Context, id string) (*orderly.WalletAccount, error) {
	var a *orderly.WalletAccount
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) (err error) {
		a, err = tx.WalletAccountGet(ctx, id)
		return err
	})
	return a, err
}

// GetHold implements orderly.WalletService.
func (s *Service) GetHold(ctx context.Context, id string) (*orderly.WalletHold, error) {
	var h *orderly.WalletHold
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) (err error) {
		h, err = tx.WalletHoldGet(ctx, id)
		return err
	})
	return h, err
}

// Transfer returns a transfer with its entries; ENOTFOUND if there is none.
func (s *Service) Transfer(ctx context.Context, id string) (*orderly.WalletTransfer, error) {
	var tr *orderly.WalletTransfer
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) (err error) {
		tr, err = tx.WalletTransferGet(ctx, id)
		return err
	})
	return tr, err
}

// run runs op, which books tr, in one write transaction with a new transfer id, on the
// database clock. When tr's idempotency key was used already (the insert of tr met it, or
// op returned errReplay), it returns the transfer written under that key with Replay set,
// or EIDEMPOTENCY when that was another operation.
func (s *Service) run(ctx context.Context, tr *orderly.WalletTransfer, op func(ctx context.Context, tx store.Tx, now time.Time) error) (*orderly.WalletTransfer, error) {
	id, err := order.NewID()
	if err != nil {
		return nil, err
	}
	replay := false
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		replay = false
		tr.ID, tr.Refunded = id, 0
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		err = op(ctx, tx, now)
		if errors.Is(err, errReplay) {
			replay = true
		}
		return err
	})
	if !replay && err != nil {
		return nil, fmt.Errorf("wallet %s: %w", tr.Kind, err)
	} else if !replay {
		return tr, nil
	}
	var first *orderly.WalletTransfer
	if err := s.cfg.Store.Read(ctx, func(tx store.Tx) (err error) {
		first, err = tx.WalletTransferByKey(ctx, tr.IdempotencyKey)
		return err
	}); err != nil {
		return nil, fmt.Errorf("wallet %s: replay: %w", tr.Kind, err)
	}
	if first.Kind != tr.Kind || first.Amount != tr.Amount && tr.Kind != orderly.TransferVoid ||
		tr.AccountID != "" && first.AccountID != tr.AccountID ||
		(tr.Kind == orderly.TransferPost || tr.Kind == orderly.TransferVoid) && first.HoldID != tr.HoldID ||
		tr.RefundOf != first.RefundOf || tr.CounterpartyID != "" && first.CounterpartyID != tr.CounterpartyID {
		return nil, orderly.Errorf(orderly.EIDEMPOTENCY, "idempotency key %q was used for another operation (a %s of %d)",
			tr.IdempotencyKey, first.Kind, first.Amount)
	}
	first.Replay = true
	return first, nil
}

// book writes transfer tr (ECONFLICT on its key → errReplay) and its legs.
func book(ctx context.Context, tx store.Tx, tr *orderly.WalletTransfer, now time.Time, legs []leg) error {
	tr.CreatedAt = now
	if err := insertTransfer(ctx, tx, tr); err != nil {
		return err
	}
	return moveLegs(ctx, tx, tr, now, legs)
}

// insertTransfer writes tr; a taken idempotency key is errReplay.
func insertTransfer(ctx context.Context, tx store.Tx, tr *orderly.WalletTransfer) error {
	err := tx.WalletTransferInsert(ctx, tr)
	if orderly.ErrorCode(err) == orderly.ECONFLICT && tr.IdempotencyKey != "" {
		return errReplay
	}
	return err
}

// moveLegs changes the balances of the legs' accounts, in account id order (the lock
// order), each in one guarded UPDATE, and writes the legs as tr's entries. The legs must
// sum to zero. An account that receives money and does not exist yet is created; a user
// account that would go below zero refuses the whole transfer (EINSUFFICIENT).
func moveLegs(ctx context.Context, tx store.Tx, tr *orderly.WalletTransfer, now time.Time, legs []leg) error {
	type delta struct {
		available, held int64
		ref             *orderly.AccountRef
	}
	var (
		sum     int64
		byID    = map[string]*delta{}
		ids     []string
		entries = make([]*orderly.WalletEntry, 0, len(legs))
	)
	for _, l := range legs {
		sum += l.amount
		d := byID[l.account]
		if d == nil {
			d = &delta{}
			byID[l.account] = d
			ids = append(ids, l.account)
		}
		if l.bucket == orderly.BucketHeld {
			d.held += l.amount
		} else {
			d.available += l.amount
		}
		d.ref = cmp.Or(d.ref, l.ref)
		entries = append(entries, &orderly.WalletEntry{TransferID: tr.ID, AccountID: l.account, Bucket: l.bucket, Amount: l.amount, CreatedAt: now})
	}
	if sum != 0 || len(legs) < 2 {
		return fmt.Errorf("transfer %s: %d legs summing to %d, not a balanced transfer", tr.ID, len(legs), sum)
	}
	slices.Sort(ids)
	for _, id := range ids {
		d := byID[id]
		params := &store.WalletAccountMoveParams{ID: id, Available: d.available, Held: d.held, Now: now}
		ok, err := tx.WalletAccountMove(ctx, params)
		if err != nil {
			return err
		}
		if !ok && d.ref != nil && (d.available > 0 || d.held > 0 || d.ref.Kind == orderly.AccountSystem) {
			if err := tx.WalletAccountEnsure(ctx, *d.ref, now); err != nil {
				return err
			}
			if ok, err = tx.WalletAccountMove(ctx, params); err != nil {
				return err
			}
		}
		if !ok {
			a, err := tx.WalletAccountGet(ctx, id)
			if err != nil {
				return err
			}
			return orderly.Errorf(orderly.EINSUFFICIENT, "account %s has %d available; this %s needs %d",
				id, a.Available, tr.Kind, -d.available)
		}
	}
	return tx.WalletEntriesInsert(ctx, entries)
}

// releaseLegs are the legs that give a hold's amount back to available.
func releaseLegs(h *orderly.WalletHold) []leg {
	return []leg{
		{account: h.AccountID, bucket: orderly.BucketHeld, amount: -h.Amount},
		{account: h.AccountID, bucket: orderly.BucketAvailable, amount: h.Amount},
	}
}

// expire moves pending hold h, locked or claimed by the caller, to expired if its
// expires_at <= now (guarded in the UPDATE: never early) and books the release of its
// amount as an expire transfer (no idempotency key: the hold's state guards it). It
// reports whether the hold changed.
func expire(ctx context.Context, tx store.Tx, h *orderly.WalletHold, now time.Time) (bool, error) {
	ok, err := tx.WalletHoldResolve(ctx, &store.WalletHoldResolveParams{ID: h.ID, To: orderly.HoldExpired, At: now, ExpiredBy: &now})
	if err != nil || !ok {
		return false, err
	}
	id, err := order.NewID()
	if err != nil {
		return false, err
	}
	tr := &orderly.WalletTransfer{ID: id, Kind: orderly.TransferExpire, AccountID: h.AccountID, Currency: h.Currency,
		Amount: h.Amount, HoldID: h.ID}
	return true, book(ctx, tx, tr, now, releaseLegs(h))
}

func validateMove(p *orderly.WalletMoveParams) error {
	switch {
	case p.Account != nil && (p.UserID != "" || p.Account.Kind != orderly.AccountRole || !order.ValidID(p.Account.Owner) ||
		p.Account.Currency != p.Currency):
		return orderly.Errorf(orderly.EINVALID, "account: must be a role account in %s, without a user_id", p.Currency)
	case p.Account == nil && !order.ValidID(p.UserID):
		return orderly.Errorf(orderly.EINVALID, "user_id: must be 1–128 bytes of UTF-8 without control characters")
	case !orderly.ValidCurrency(p.Currency):
		return orderly.Errorf(orderly.EINVALID, "currency: must be an ISO 4217 code of a currency of money")
	case !orderly.ValidAmount(p.Amount):
		return orderly.Errorf(orderly.EINVALID, "amount: %s", orderly.AmountRule)
	}
	return validateKey(p.IdempotencyKey)
}

func validateKey(key string) error {
	if key == "" || len(key) > MaxKeyLength || !utf8.ValidString(key) {
		return orderly.Errorf(orderly.EINVALID, "idempotency key: required, 1–%d bytes of UTF-8", MaxKeyLength)
	}
	return nil
}

func validateRef(r orderly.AccountRef, currency string) error {
	switch {
	case r.Currency != currency:
		return orderly.Errorf(orderly.EINVALID, "counterparty: must be an account in %s", currency)
	case r.Kind == orderly.AccountSystem && (r.Owner == orderly.SystemPlatform || r.Owner == orderly.SystemExternal):
		return nil
	case r.Kind == orderly.AccountUser && order.ValidID(r.Owner):
		return nil
	}
	return orderly.Errorf(orderly.EINVALID, "counterparty: must be a user's wallet or the %s or %s system account",
		orderly.SystemPlatform, orderly.SystemExternal)
}

// stamp formats a time as the API does: RFC 3339 UTC with milliseconds.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
