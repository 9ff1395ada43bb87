package orderly

import (
	"context"
	"time"
)

// Error codes of wallets and holds (see WalletService), stable like those in error.go.
const (
	EINSUFFICIENT   = "insufficient-funds" // the account's available balance is less than the amount (409)
	EHOLDEXPIRED    = "hold-expired"       // the hold's expires_at passed on the database clock (409)
	EHOLDEXCEEDED   = "hold-exceeded"      // a capture of more than the hold's amount (409)
	EHOLDNOTPENDING = "hold-not-pending"   // the hold was posted or voided already (409)
)

// AccountKind says whose money a wallet account holds.
type AccountKind string

// Account kinds.
const (
	// AccountUser is a user's wallet in one currency: its available balance never goes
	// below zero.
	AccountUser AccountKind = "user"
	// AccountSystem is one of the engine's own accounts (SystemPlatform, SystemExternal): it
	// may go below zero, since it stands for money outside the users' wallets.
	AccountSystem AccountKind = "system"
	// AccountRole is an account the engine keeps for a role (the ride platform's fees, a
	// driver's payouts): never below zero, like a user's, but in a namespace of its own, so
	// that no buyer id addresses it (a user "ride_platform" is "user:<ccy>:ride_platform",
	// not the platform's "role:<ccy>:ride_platform").
	AccountRole AccountKind = "role"
)

// Names of the system accounts, one of each per currency.
const (
	// SystemPlatform receives what users pay (debits, captured holds) and pays refunds back.
	SystemPlatform = "platform"
	// SystemExternal is the world outside the ledger: a top-up (credit) moves money from
	// it into a wallet, a payout moves money back to it. Its balance is minus the money
	// that entered the ledger, so it reads negative.
	SystemExternal = "external"
)

// AccountRef names a wallet account: a user's (Kind AccountUser, Owner the user id) or a
// system account (Kind AccountSystem, Owner SystemPlatform or SystemExternal), in Currency
// (ISO 4217).
type AccountRef struct {
	Kind     AccountKind `json:"kind"`
	Owner    string      `json:"owner"`
	Currency string      `json:"currency"`
}

// UserAccount returns the reference of userID's wallet in currency.
func UserAccount(userID, currency string) AccountRef {
	return AccountRef{Kind: AccountUser, Owner: userID, Currency: currency}
}

// RoleAccount returns the reference of role account name in currency (name: 1–128 bytes,
// e.g. "ride_platform", "driver:<driver id>").
func RoleAccount(name, currency string) AccountRef {
	return AccountRef{Kind: AccountRole, Owner: name, Currency: currency}
}

// SystemAccount returns the reference of system account name in currency.
func SystemAccount(name, currency string) AccountRef {
	return AccountRef{Kind: AccountSystem, Owner: name, Currency: currency}
}

// ID returns the account's id, "<kind>:<currency>:<owner>" (the currency, three letters,
// comes before the owner so that an owner containing ':' cannot make two refs collide).
func (r AccountRef) ID() string { return string(r.Kind) + ":" + r.Currency + ":" + r.Owner }

// WalletAccount is one account of the ledger with its balances in minor units of Currency:
// Available can be spent, Held is reserved by pending holds. Both are kept as columns and
// equal, at every commit, the sums of the account's ledger entries per bucket (verify
// checks it). A user account's balances are never negative.
type WalletAccount struct {
	ID        string      `json:"id"`
	Kind      AccountKind `json:"kind"`
	Owner     string      `json:"owner"`
	Currency  string      `json:"currency"`
	Available int64       `json:"available"`
	Held      int64       `json:"held"`
	Version   int64       `json:"version"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

// TransferKind is the operation a ledger transfer records.
type TransferKind string

// Transfer kinds.
const (
	TransferCredit TransferKind = "credit" // counterparty (external) → user available
	TransferDebit  TransferKind = "debit"  // user available → counterparty (platform)
	TransferHold   TransferKind = "hold"   // user available → user held
	TransferPost   TransferKind = "post"   // user held → counterparty (captured) + user available (remainder)
	TransferVoid   TransferKind = "void"   // user held → user available
	TransferExpire TransferKind = "expire" // user held → user available, by the closer at expires_at
	TransferRefund TransferKind = "refund" // counterparty → user available, against a debit or post
)

// Bucket is the part of an account an entry moves: available or held money.
type Bucket string

// Buckets.
const (
	BucketAvailable Bucket = "available"
	BucketHeld      Bucket = "held"
)

// WalletTransfer is one money movement: two or more entries that sum to zero, written in
// one transaction with the balance changes. AccountID is the user account the operation is
// about, CounterpartyID the other side (a system account or another user's); Amount (minor
// units, > 0) is what moved to or from the counterparty (for a hold or a void: the amount
// held or released). IdempotencyKey ("" only for expiries, which the hold's state guards)
// is unique: the same key sent again returns this transfer and moves nothing. Refunded is
// the part of a debit or post that refunds gave back (≤ Amount).
type WalletTransfer struct {
	ID             string       `json:"id"`
	Kind           TransferKind `json:"kind"`
	IdempotencyKey string       `json:"idempotency_key,omitempty"`
	AccountID      string       `json:"account_id"`
	CounterpartyID string       `json:"counterparty_id,omitempty"`
	Currency       string       `json:"currency"`
	Amount         int64        `json:"amount"`
	HoldID         string       `json:"hold_id,omitempty"`
	RefundOf       string       `json:"refund_of,omitempty"`
	Refunded       int64        `json:"refunded"`
	CreatedAt      time.Time    `json:"created_at"`
	// Replay is true when the call was a retry of an operation already applied under the
	// same idempotency key: nothing moved. Not stored.
	Replay  bool           `json:"-"`
	Entries []*WalletEntry `json:"entries,omitempty"`
}

// WalletEntry is one line of the ledger: Amount (minor units, never 0; positive adds to
// the bucket) of one account's bucket, part of one transfer. IDs increase in commit order
// per database sequence and page an account's entries.
type WalletEntry struct {
	ID         int64  `json:"id"`
	TransferID string `json:"transfer_id"`
	// Kind is the kind of the entry's transfer (read with the entry, not stored in it).
	Kind      TransferKind `json:"kind,omitempty"`
	AccountID string       `json:"account_id"`
	Bucket    Bucket       `json:"bucket"`
	Amount    int64        `json:"amount"`
	CreatedAt time.Time    `json:"created_at"`
}

// HoldState is the state of a hold: pending until it is posted, voided or expired, once.
type HoldState string

// Hold states.
const (
	HoldPending HoldState = "pending" // the amount is held; expires_at is a timed state
	HoldPosted  HoldState = "posted"  // captured (≤ amount), the remainder released (terminal)
	HoldVoided  HoldState = "voided"  // released in full before expires_at (terminal)
	HoldExpired HoldState = "expired" // released in full at or after expires_at (terminal)
)

// WalletHold is two-phase money (like a card pre-authorisation) on a user account: Amount
// (minor units) moved from available to held until it resolves, exactly once: posted
// (Captured ≤ Amount to the counterparty, the rest back to available, in one transfer),
// voided, or expired by the closer at or after ExpiresAt (database clock). ID is the id of
// the hold's transfer.
type WalletHold struct {
	ID         string     `json:"id"`
	AccountID  string     `json:"account_id"`
	Currency   string     `json:"currency"`
	Amount     int64      `json:"amount"`
	Captured   int64      `json:"captured"`
	State      HoldState  `json:"state"`
	ExpiresAt  time.Time  `json:"expires_at"`
	CreatedAt  time.Time  `json:"created_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
}

// WalletMoveParams is the input of WalletService.Credit and Debit: Amount minor units of
// Currency between UserID's wallet and Counterparty (zero value: SystemExternal for a
// credit, SystemPlatform for a debit, in Currency). IdempotencyKey is required. Account,
// set by the engine's own services and never from a request, moves a role account
// (RoleAccount) instead of a user's wallet; UserID is then empty.
type WalletMoveParams struct {
	UserID         string
	Account        *AccountRef
	Currency       string
	Amount         int64
	Counterparty   *AccountRef
	IdempotencyKey string
}

// WalletHoldParams is the input of WalletService.Hold: hold Amount of UserID's Currency
// wallet until now + TTL (database clock). IdempotencyKey is required.
type WalletHoldParams struct {
	UserID         string
	Currency       string
	Amount         int64
	TTL            time.Duration // > 0, at most 30 days
	IdempotencyKey string
}

// WalletPostParams is the input of WalletService.Post: capture Amount (1 … the hold's
// amount) of hold HoldID to Counterparty (zero value: SystemPlatform).
type WalletPostParams struct {
	HoldID         string
	Amount         int64
	Counterparty   *AccountRef
	IdempotencyKey string
}

// WalletRefundParams is the input of WalletService.Refund: give Amount of debit or post
// transfer TransferID back from its counterparty to its user account.
type WalletRefundParams struct {
	TransferID     string
	Amount         int64
	IdempotencyKey string
}

// WalletEntriesPage asks for a page of an account's entries, newest first: those with id <
// BeforeID (0: from the newest), at most Limit (0: 50; at most 500).
type WalletEntriesPage struct {
	BeforeID int64
	Limit    int
}

// Wallet is a user account with one page of its entries, newest first; NextBeforeID is
// the BeforeID of the next page, 0 on the last.
type Wallet struct {
	Account      *WalletAccount
	Entries      []*WalletEntry
	NextBeforeID int64
}

// WalletService moves money between wallet accounts over a double-entry ledger. Every
// operation runs in one transaction, writes one transfer whose entries sum to zero and is
// idempotent per key: the same key returns the first result (Replay true), with a
// different operation or amount EIDEMPOTENCY. Amounts are int64 minor units, > 0.
//
// Errors: EINVALID (bad input), ENOTFOUND (no such wallet, hold or transfer),
// EINSUFFICIENT (a user account's available balance would go below zero: nothing moved),
// EHOLDEXPIRED, EHOLDEXCEEDED, EHOLDNOTPENDING, EREFUNDEXCEEDS, EIDEMPOTENCY.
type WalletService interface {
	// Credit moves money into a user's wallet (a top-up from SystemExternal by default).
	Credit(ctx context.Context, p *WalletMoveParams) (*WalletTransfer, error)
	// Debit moves money out of a user's wallet (to SystemPlatform by default).
	Debit(ctx context.Context, p *WalletMoveParams) (*WalletTransfer, error)
	// Hold reserves an amount until an expiry.
	Hold(ctx context.Context, p *WalletHoldParams) (*WalletHold, *WalletTransfer, error)
	// Post captures part or all of a pending, unexpired hold and releases the rest.
	Post(ctx context.Context, p *WalletPostParams) (*WalletHold, *WalletTransfer, error)
	// Void releases a pending, unexpired hold in full.
	Void(ctx context.Context, holdID, idempotencyKey string) (*WalletHold, *WalletTransfer, error)
	// Refund gives back part or all of a debit or a post.
	Refund(ctx context.Context, p *WalletRefundParams) (*WalletTransfer, error)
	// Wallet returns a user's account in currency ("": the user's only account; EINVALID when
	// the user has several) with a page of its entries.
	Wallet(ctx context.Context, userID, currency string, page *WalletEntriesPage) (*Wallet, error)
	// GetHold returns a hold; ENOTFOUND if there is none.
	GetHold(ctx context.Context, id string) (*WalletHold, error)
	// Account returns an account by its id ("<kind>:<currency>:<owner>"); ENOTFOUND if
	// there is none.
	Account(ctx context.Context, id string) (*WalletAccount, error)
}
