package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
)

// walletEntryResponse is the JSON of an orderly.WalletEntry.
type walletEntryResponse struct {
	ID         int64                `json:"id"`
	TransferID string               `json:"transfer_id"`
	Kind       orderly.TransferKind `json:"kind"`
	Bucket     orderly.Bucket       `json:"bucket"`
	Amount     int64                `json:"amount"`
	CreatedAt  Time                 `json:"created_at"`
}

// walletResponse is the JSON of a user's wallet in one currency: balance (available) and
// held in minor units, and one page of its ledger entries, newest first. NextBefore is the
// `before` of the next page; absent on the last.
type walletResponse struct {
	UserID     string                 `json:"user_id"`
	Currency   string                 `json:"currency"`
	Balance    int64                  `json:"balance"`
	Held       int64                  `json:"held"`
	Version    int64                  `json:"version"`
	UpdatedAt  Time                   `json:"updated_at"`
	Entries    []*walletEntryResponse `json:"entries"`
	NextBefore *int64                 `json:"next_before,omitempty"`
}

// walletCreditRequest is the body of POST /v1/wallets/{user_id}/credits.
type walletCreditRequest struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// walletTransferResponse is the JSON of an orderly.WalletTransfer.
type walletTransferResponse struct {
	ID             string               `json:"id"`
	Kind           orderly.TransferKind `json:"kind"`
	AccountID      string               `json:"account_id"`
	CounterpartyID string               `json:"counterparty_id"`
	Amount         int64                `json:"amount"`
	Currency       string               `json:"currency"`
	CreatedAt      Time                 `json:"created_at"`
}

// walletAccountResponse is the JSON of an orderly.WalletAccount: any account of the
// ledger, a role's (the ride platform's fees, a driver's payouts) or a system's.
type walletAccountResponse struct {
	ID        string              `json:"id"`
	Kind      orderly.AccountKind `json:"kind"`
	Owner     string              `json:"owner"`
	Currency  string              `json:"currency"`
	Available int64               `json:"available"`
	Held      int64               `json:"held"`
	Version   int64               `json:"version"`
	UpdatedAt Time                `json:"updated_at"`
}

// walletRoutes registers the wallet routes.
func (s *Server) walletRoutes(r chi.Router) {
	r.Get("/v1/wallets/{user_id}", s.getWallet)
	r.Post("/v1/wallets/{user_id}/credits", s.creditWallet)
	r.Get("/v1/wallet-accounts/{account_id}", s.getWalletAccount)
}

// getWalletAccount handles GET /v1/wallet-accounts/{account_id} (merchant scope): an
// account of the ledger by its id, "<kind>:<currency>:<owner>" (role:USD:ride_platform,
// role:USD:driver:<id>, user:USD:<user id>). Role and system accounts are read here only:
// /v1/wallets/{user_id} addresses users' wallets, never them.
func (s *Server) getWalletAccount(w http.ResponseWriter, r *http.Request) {
	a, err := s.wallets.Account(r.Context(), pathParam(r, "account_id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, &walletAccountResponse{ID: a.ID, Kind: a.Kind, Owner: a.Owner, Currency: a.Currency,
		Available: a.Available, Held: a.Held, Version: a.Version, UpdatedAt: Time(a.UpdatedAt)})
}

// getWallet handles GET /v1/wallets/{user_id}?currency=&limit=&before=: the wallet in
// currency (absent: the user's only wallet) with a page of limit entries (default 50, at
// most 500) older than entry id before.
func (s *Server) getWallet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page := &orderly.WalletEntriesPage{}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			s.writeError(w, r, invalidf("before: must be an entry id (the next_before of the previous page)"))
			return
		}
		page.BeforeID = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.writeError(w, r, invalidf("limit: must be a positive integer"))
			return
		}
		page.Limit = n
	}
	wal, err := s.wallets.Wallet(r.Context(), pathParam(r, "user_id"), q.Get("currency"), page)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	a := wal.Account
	resp := &walletResponse{UserID: a.Owner, Currency: a.Currency, Balance: a.Available, Held: a.Held, Version: a.Version,
		UpdatedAt: Time(a.UpdatedAt), Entries: make([]*walletEntryResponse, len(wal.Entries))}
	for i, e := range wal.Entries {
		resp.Entries[i] = &walletEntryResponse{ID: e.ID, TransferID: e.TransferID, Kind: e.Kind, Bucket: e.Bucket, Amount: e.Amount,
			CreatedAt: Time(e.CreatedAt)}
	}
	if wal.NextBeforeID != 0 {
		resp.NextBefore = &wal.NextBeforeID
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// creditWallet handles POST /v1/wallets/{user_id}/credits: a top-up from the external
// system account; the Idempotency-Key header is required (per user: the same key and body
// answer the first credit, 200; another body 422 idempotency-key-reused). 201 with the
// transfer.
func (s *Server) creditWallet(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(IdempotencyKeyHeader)
	if err := validateIdempotencyKey(key); err != nil {
		s.writeError(w, r, err)
		return
	} else if key == "" {
		s.writeError(w, r, invalidf("%s header: required, so that a retried top-up credits once", IdempotencyKeyHeader))
		return
	}
	var req walletCreditRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	userID := pathParam(r, "user_id")
	tr, err := s.wallets.Credit(r.Context(), &orderly.WalletMoveParams{UserID: userID, Currency: req.Currency, Amount: req.Amount,
		IdempotencyKey: creditKey(userID, key)})
	if orderly.ErrorCode(err) == orderly.EIDEMPOTENCY {
		// The ledger's key is a hash of the user and the client's key: name the client's.
		err = orderly.Errorf(orderly.EIDEMPOTENCY, "%s %q was used for another top-up of user %s", IdempotencyKeyHeader, key, userID)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := replayed(w, tr.Replay)
	if !tr.Replay {
		w.Header().Set("Location", "/v1/wallets/"+url.PathEscape(userID))
	}
	s.writeJSON(w, r, status, &walletTransferResponse{ID: tr.ID, Kind: tr.Kind, AccountID: tr.AccountID, CounterpartyID: tr.CounterpartyID,
		Amount: tr.Amount, Currency: tr.Currency, CreatedAt: Time(tr.CreatedAt)})
}

// creditKey is the ledger's idempotency key of a top-up: the client's key scoped to the
// user (hashed, so that any user id and key fit the ledger's 255 bytes).
func creditKey(userID, key string) string {
	sum := sha256.Sum256([]byte(userID + "\x00" + key))
	return "http-credit:" + hex.EncodeToString(sum[:])
}

// noWallets answers the wallet routes of a server built without a WalletService.
type noWallets struct{ orderly.WalletService }

var errNoWallets = orderly.Errorf(orderly.ENOTFOUND, "wallets are not enabled on this server")

func (noWallets) Credit(context.Context, *orderly.WalletMoveParams) (*orderly.WalletTransfer, error) {
	return nil, errNoWallets
}

func (noWallets) Wallet(context.Context, string, string, *orderly.WalletEntriesPage) (*orderly.Wallet, error) {
	return nil, errNoWallets
}

func (noWallets) Account(context.Context, string) (*orderly.WalletAccount, error) {
	return nil, errNoWallets
}
