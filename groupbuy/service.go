// Package groupbuy runs group-buy (拼团) deals and groups (docs/flows/group-buy.md): a deal
// offers a SKU at a group price to groups of min_members to max_members members who join
// and pay before the group's deadline. Member orders are ordinary orders of Flow
// (group_buy), created and moved by package order's Service and Machine; this package owns
// the deals, groups and members, the flow's own effects (Effects) and the group deadlines
// (Deadlines, a closer.Timed driven by the closer).
//
// Lock order: every transaction that changes a group locks the group row before any of its
// member orders (joins, leaves, the pay transition through EffectLockGroup, the failure at
// the deadline through the closer's claim). Giving up a seat changes the member row only.
// So no two transactions of one group wait for each other in a cycle.
package groupbuy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

// Limits of deals.
const (
	MaxMembers     = 1000               // cap of max_members
	MaxGroupWindow = 7 * 24 * time.Hour // cap of group_time_limit_seconds
)

// Config configures a Service.
type Config struct {
	Store store.Store
	// Orders creates and cancels member orders; its Machine must know Flow (package
	// engine builds one Machine with Effects and gives it to every service).
	Orders *order.Service
	// Signals is told of each group committed with its deadline (the timers of this
	// instance and the others re-arm for it) and of outbox messages written; nil drops them.
	Signals orderly.Signals
	Logger  *slog.Logger
}

// Service implements orderly.GroupService.
type Service struct {
	cfg  Config
	flow *orderly.Flow
	// deals caches the deals read, by id, up to maxCachedDeals (then it starts again): a
	// deal never changes once created, so a join or an open reads it from the database
	// about once per process, not once a seat.
	dealsMu sync.Mutex
	deals   map[string]*orderly.Deal
}

// maxCachedDeals bounds Service.deals.
const maxCachedDeals = 10_000

var _ orderly.GroupService = (*Service)(nil)

// NewService returns a Service; it returns an error when cfg has no Store or Orders, or
// the orders' machine has no group_buy flow.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Orders == nil {
		return nil, errors.New("groupbuy: Config.Store and Config.Orders are required")
	}
	flow, err := cfg.Orders.Machine().Flow(FlowName)
	if err != nil {
		return nil, fmt.Errorf("groupbuy: the order machine has no %s flow: %w", FlowName, err)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	return &Service{cfg: cfg, flow: flow, deals: map[string]*orderly.Deal{}}, nil
}

// validateDeal checks p and fills in the default member timeout. Errors: EINVALID.
func validateDeal(p *orderly.CreateDealParams) error {
	limit := int64(MaxGroupWindow / time.Second)
	switch {
	case !order.ValidID(p.SKU):
		return orderly.Errorf(orderly.EINVALID, "sku must be 1–%d bytes of UTF-8 without control characters", order.MaxIDLength)
	case !orderly.ValidAmount(p.GroupPrice):
		return orderly.Errorf(orderly.EINVALID, "group_price %s", orderly.AmountRule)
	case !orderly.ValidCurrency(p.Currency):
		return orderly.Errorf(orderly.EINVALID, "currency must be the ISO 4217 code of a currency of money, such as USD")
	case p.MinMembers < 2:
		return orderly.Errorf(orderly.EINVALID, "min_members must be at least 2")
	case p.MaxMembers < p.MinMembers || p.MaxMembers > MaxMembers:
		return orderly.Errorf(orderly.EINVALID, "max_members must be min_members (%d) to %d", p.MinMembers, MaxMembers)
	case p.GroupTimeLimitSeconds < 1 || p.GroupTimeLimitSeconds > limit:
		return orderly.Errorf(orderly.EINVALID, "group_time_limit_seconds must be 1 to %d (7 days)", limit)
	case p.MemberPaymentTimeoutSeconds < 0 || p.MemberPaymentTimeoutSeconds > p.GroupTimeLimitSeconds:
		return orderly.Errorf(orderly.EINVALID, "member_payment_timeout_seconds must be 1 to group_time_limit_seconds (%d), or absent", p.GroupTimeLimitSeconds)
	}
	return nil
}

// CreateDeal implements orderly.GroupService.
func (s *Service) CreateDeal(ctx context.Context, p *orderly.CreateDealParams) (*orderly.Deal, error) {
	if err := validateDeal(p); err != nil {
		return nil, err
	}
	id, err := order.NewID()
	if err != nil {
		return nil, err
	}
	d := &orderly.Deal{
		ID: id, SKU: p.SKU, GroupPrice: p.GroupPrice, Currency: p.Currency, MinMembers: p.MinMembers, MaxMembers: p.MaxMembers,
		GroupTimeLimitSeconds:       p.GroupTimeLimitSeconds,
		MemberPaymentTimeoutSeconds: cmp.Or(p.MemberPaymentTimeoutSeconds, p.GroupTimeLimitSeconds),
	}
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		if d.CreatedAt, err = tx.Now(ctx); err != nil {
			return err
		}
		return tx.DealInsert(ctx, d)
	})
	if err != nil {
		return nil, fmt.Errorf("create deal: %w", err)
	}
	s.cacheDeal(d)
	return d, nil
}

// Deal implements orderly.GroupService.
func (s *Service) Deal(ctx context.Context, id string) (d *orderly.Deal, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		d, err = tx.DealGet(ctx, id)
		return err
	})
	return d, err
}

// deal returns deal id, from the cache when it was read before (deals never change).
// Errors: ENOTFOUND.
func (s *Service) deal(ctx context.Context, tx store.Tx, id string) (*orderly.Deal, error) {
	s.dealsMu.Lock()
	d := s.deals[id]
	s.dealsMu.Unlock()
	if d != nil {
		return d, nil
	}
	d, err := tx.DealGet(ctx, id)
	if err != nil {
		return nil, err
	}
	s.cacheDeal(d)
	return d, nil
}

// cacheDeal adds a copy of d to the cache, after emptying a full one.
func (s *Service) cacheDeal(d *orderly.Deal) {
	c := *d
	s.dealsMu.Lock()
	defer s.dealsMu.Unlock()
	if len(s.deals) >= maxCachedDeals {
		clear(s.deals)
	}
	s.deals[d.ID] = &c
}

// Group implements orderly.GroupService.
func (s *Service) Group(ctx context.Context, id string) (g *orderly.Group, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		g, err = load(ctx, tx, id)
		return err
	})
	return g, err
}

// load reads a group with its members.
func load(ctx context.Context, tx store.Tx, id string) (*orderly.Group, error) {
	g, err := tx.GroupGet(ctx, id)
	if err != nil {
		return nil, err
	}
	g.Members, err = tx.GroupMembers(ctx, id)
	return g, err
}

// validateJoin checks the member part of p. Errors: EINVALID.
func validateJoin(p *orderly.JoinGroupParams) error {
	switch {
	case !order.ValidID(p.UserID):
		return orderly.Errorf(orderly.EINVALID, "user_id must be 1–%d bytes of UTF-8 without control characters", order.MaxIDLength)
	case p.Quantity < 0 || p.Quantity > order.MaxQuantity:
		return orderly.Errorf(orderly.EINVALID, "quantity must be 1–%d (absent means 1)", order.MaxQuantity)
	}
	if err := p.GroupMetadata.Validate(); err != nil {
		return orderly.Errorf(orderly.EINVALID, "group_%s", orderly.ErrorMessage(err))
	}
	return p.Metadata.Validate()
}

// memberOrder returns the parameters of p's member order of deal d.
func memberOrder(d *orderly.Deal, p *orderly.JoinGroupParams) *orderly.CreateOrderParams {
	return &orderly.CreateOrderParams{
		UserID: p.UserID, Currency: d.Currency, CouponID: p.CouponID, Flow: FlowName,
		Items:                 []orderly.Item{{SKU: d.SKU, Quantity: cmp.Or(p.Quantity, 1), UnitPrice: d.GroupPrice}},
		PaymentTimeoutSeconds: d.MemberPaymentTimeoutSeconds,
		Metadata:              p.Metadata,
		IdempotencyKey:        p.IdempotencyKey, Actor: cmp.Or(p.Actor, "buyer"), TraceID: p.TraceID,
	}
}

// OpenGroup implements orderly.GroupService.
func (s *Service) OpenGroup(ctx context.Context, p *orderly.JoinGroupParams) (*orderly.Group, *orderly.Order, bool, error) {
	if err := validateJoin(p); err != nil {
		return nil, nil, false, err
	}
	if !order.ValidID(p.DealID) {
		return nil, nil, false, orderly.Errorf(orderly.EINVALID, "deal_id must name a deal")
	}
	groupID, err := order.NewID()
	if err != nil {
		return nil, nil, false, err
	}
	return s.admit(ctx, p, func(ctx context.Context, tx store.Tx) (*orderly.Order, *orderly.Group, bool, error) {
		d, err := s.deal(ctx, tx, p.DealID)
		if err != nil {
			return nil, nil, false, err
		}
		var g *orderly.Group
		o, created, err := s.cfg.Orders.CreateInTx(ctx, tx, memberOrder(d, p), &order.CreateOptions{
			// The group's metadata is part of the request: the same key with other group
			// metadata is another request.
			RequestTag: "open group of deal " + d.ID + "\x00" + fmt.Sprint(map[string]string(p.GroupMetadata)),
			Admit: func(now time.Time) (time.Time, error) {
				g = &orderly.Group{
					ID: groupID, DealID: d.ID, State: orderly.GroupForming, LeaderUserID: p.UserID,
					MinMembers: d.MinMembers, MaxMembers: d.MaxMembers, CreatedAt: now,
					DeadlineAt: now.Add(time.Duration(d.GroupTimeLimitSeconds) * time.Second),
					Metadata:   p.GroupMetadata,
				}
				return g.DeadlineAt, tx.GroupInsert(ctx, g)
			},
			Inserted: func(o *orderly.Order) error {
				m := &orderly.GroupMember{GroupID: g.ID, UserID: p.UserID, OrderID: o.ID, OrderState: o.State, PayStatus: o.PayStatus, JoinedAt: o.CreatedAt}
				if err := tx.GroupMemberInsert(ctx, m); err != nil {
					return err
				}
				// The group is this transaction's own row: what it wrote is what a read
				// would give back (GroupInsert stores version 1).
				g.Members, g.SeatsTaken, g.Version = []*orderly.GroupMember{m}, 1, max(g.Version, 1)
				return nil
			},
		})
		return o, g, created, err
	})
}

// joinRefusal is the answer to a join of group g at now (database clock) when g takes no
// more members whatever its seats: EGROUPEXPIRED at or after the deadline (what users
// observe is the deadline, not whether the failure at it has run: a failed group answers
// group-expired either way), else EGROUPNOTFORMING when it is no longer forming; nil
// otherwise. Both are final: a group never forms again and its deadline never moves.
func joinRefusal(g *orderly.Group, now time.Time) error {
	switch {
	case !now.Before(g.DeadlineAt):
		return orderly.Errorf(orderly.EGROUPEXPIRED, "the deadline of group %s passed at %s", g.ID, g.DeadlineAt.Format(time.RFC3339Nano))
	case g.State != orderly.GroupForming:
		return orderly.Errorf(orderly.EGROUPNOTFORMING, "group %s is %s", g.ID, g.State)
	}
	return nil
}

// leaveRefusal is joinRefusal for a leave: EGROUPNOTFORMING in both cases.
func leaveRefusal(g *orderly.Group, now time.Time) error {
	switch {
	case g.State != orderly.GroupForming:
		return orderly.Errorf(orderly.EGROUPNOTFORMING, "group %s is %s", g.ID, g.State)
	case !now.Before(g.DeadlineAt):
		return orderly.Errorf(orderly.EGROUPNOTFORMING, "the deadline of group %s passed at %s; it is failing", g.ID, g.DeadlineAt.Format(time.RFC3339Nano))
	}
	return nil
}

// refuseUnlocked answers refusal (joinRefusal or leaveRefusal) for group id from a
// read-only transaction (the group and the database clock), before the caller's write
// transaction waits for the group's row: a join or leave that the group can no longer take
// (the most frequent answer when many groups are failing at once) neither queues behind
// the transactions that hold the group, such as its failure, nor takes the writer (SQLite).
// Both refusals are final, so a read that says so is the answer; when it does not, the
// caller checks again with the row locked. A replay of a request that was applied (its
// idempotency key, when not empty, names an order of userID) is not refused here: it is
// answered with its order whatever the group's state now. ENOTFOUND when there is no such
// group.
func (s *Service) refuseUnlocked(ctx context.Context, id, userID, key string, refusal func(*orderly.Group, time.Time) error) error {
	return s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		g, err := tx.GroupGet(ctx, id)
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		refused := refusal(g, now)
		if refused == nil || key == "" {
			return refused
		}
		// Refused: unless it is the replay of a request that was applied.
		if _, _, err := tx.OrderGetByIdempotencyKey(ctx, userID, key); err == nil {
			return nil
		} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return err
		}
		return refused
	})
}

// JoinGroup implements orderly.GroupService. The group row is locked first: joins of one
// group run one at a time, so two joins for the last seat see each other and one is
// refused (EGROUPFULL). The deadline is compared with the database clock, so a join after
// it is refused (EGROUPEXPIRED) even before the closer failed the group; such a join, and
// one to a group no longer forming (EGROUPNOTFORMING), is refused from a plain read before
// the lock, without waiting for the transactions that hold the group (refuseUnlocked).
// Within the transaction the member row is written and the group read back before the
// deal's stock is reserved (order.CreateOptions.Inserted), the hottest row taken last.
func (s *Service) JoinGroup(ctx context.Context, p *orderly.JoinGroupParams) (*orderly.Group, *orderly.Order, bool, error) {
	if err := validateJoin(p); err != nil {
		return nil, nil, false, err
	}
	if !order.ValidID(p.GroupID) {
		return nil, nil, false, orderly.Errorf(orderly.ENOTFOUND, "group %q not found", p.GroupID)
	} else if len(p.GroupMetadata) > 0 {
		return nil, nil, false, orderly.Errorf(orderly.EINVALID, "group_metadata is set when a group opens; change it with PATCH /v1/groups/{id}")
	}
	if err := s.refuseUnlocked(ctx, p.GroupID, p.UserID, p.IdempotencyKey, joinRefusal); err != nil {
		return nil, nil, false, err
	}
	return s.admit(ctx, p, func(ctx context.Context, tx store.Tx) (*orderly.Order, *orderly.Group, bool, error) {
		g, err := tx.GroupLock(ctx, p.GroupID)
		if err != nil {
			return nil, nil, false, err
		}
		d, err := s.deal(ctx, tx, g.DealID)
		if err != nil {
			return nil, nil, false, err
		}
		o, created, err := s.cfg.Orders.CreateInTx(ctx, tx, memberOrder(d, p), &order.CreateOptions{
			RequestTag: "join group " + g.ID,
			Admit: func(now time.Time) (time.Time, error) {
				if err := joinRefusal(g, now); err != nil {
					return time.Time{}, err
				}
				if g.SeatsTaken < g.MaxMembers {
					// A user who holds a seat already is refused by the member row's
					// unique seat (Inserted), without a read here.
					return g.DeadlineAt, nil
				}
				if _, err := tx.GroupMemberSeat(ctx, g.ID, p.UserID); err == nil {
					return time.Time{}, orderly.Errorf(orderly.EALREADYMEMBER, "user %s already holds a seat in group %s", p.UserID, g.ID)
				} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
					return time.Time{}, err
				}
				return time.Time{}, orderly.Errorf(orderly.EGROUPFULL, "group %s has all its %d seats taken", g.ID, g.MaxMembers)
			},
			Inserted: func(o *orderly.Order) error {
				err := tx.GroupMemberInsert(ctx, &orderly.GroupMember{GroupID: g.ID, UserID: p.UserID, OrderID: o.ID, JoinedAt: o.CreatedAt})
				if orderly.ErrorCode(err) == orderly.ECONFLICT {
					return orderly.Errorf(orderly.EALREADYMEMBER, "user %s already holds a seat in group %s", p.UserID, g.ID)
				} else if err != nil {
					return err
				}
				// The group row is locked: only its members changed since it was read (a
				// seat given up by a close does not take the group's lock), so they are
				// read back and the seats counted from them.
				if g.Members, err = tx.GroupMembers(ctx, g.ID); err != nil {
					return err
				}
				g.SeatsTaken = 0
				for _, m := range g.Members {
					if m.LeftAt == nil {
						g.SeatsTaken++
					}
				}
				return nil
			},
		})
		return o, g, created, err
	})
}

// admit runs fn (which creates a member order and returns it, its group read back with the
// new member when it created it, and whether it did) in a transaction, twice when a
// concurrent request with the same idempotency key won the key first; a replay finds the
// group through the order's member row and reads it in the same transaction.
func (s *Service) admit(ctx context.Context, p *orderly.JoinGroupParams,
	fn func(ctx context.Context, tx store.Tx) (*orderly.Order, *orderly.Group, bool, error)) (*orderly.Group, *orderly.Order, bool, error) {
	var (
		g       *orderly.Group
		o       *orderly.Order
		created bool
		err     error
	)
	for attempt := 0; attempt < 2; attempt++ {
		err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			var err error
			if o, g, created, err = fn(ctx, tx); err != nil || created {
				return err
			}
			m, err := tx.GroupMemberByOrder(ctx, o.ID)
			if err != nil {
				return err
			}
			g, err = load(ctx, tx, m.GroupID)
			return err
		})
		if p.IdempotencyKey == "" || orderly.ErrorCode(err) != orderly.ECONFLICT {
			break
		}
	}
	if err != nil {
		return nil, nil, false, err
	}
	if created {
		s.cfg.Orders.Created(ctx, o)
		s.cfg.Signals.Deadline(ctx, g.DeadlineAt)
	}
	return g, o, created, nil
}

// leaveRounds bounds how often LeaveGroup starts again because the member order was paid
// while it was being cancelled.
const leaveRounds = 3

// LeaveGroup implements orderly.GroupService. A paid member leaves in one transaction with
// the group row locked: its order moves paid --leave--> refunding (the seat is freed and a
// full refund with restock requested through the outbox) and the group counts one paid
// member less. An unpaid member's order is cancelled as a buyer cancel (stock and coupon
// released, the attempt in flight cancelled at the gateway first), which frees the seat.
func (s *Service) LeaveGroup(ctx context.Context, groupID, userID, actor, traceID string) (*orderly.Group, error) {
	actor = cmp.Or(actor, "buyer")
	if !order.ValidID(userID) {
		return nil, orderly.Errorf(orderly.EINVALID, "user_id must be 1–%d bytes of UTF-8 without control characters", order.MaxIDLength)
	}
	if err := s.refuseUnlocked(ctx, groupID, userID, "", leaveRefusal); err != nil {
		return nil, fmt.Errorf("leave group %s: %w", groupID, err)
	}
	for round := 1; ; round++ {
		var unpaid string
		err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			unpaid = ""
			g, err := tx.GroupLock(ctx, groupID)
			if err != nil {
				return err
			}
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			if err := leaveRefusal(g, now); err != nil {
				return err
			}
			m, err := tx.GroupMemberSeat(ctx, g.ID, userID)
			if orderly.ErrorCode(err) == orderly.ENOTFOUND {
				return orderly.Errorf(orderly.ENOTFOUND, "user %s holds no seat in group %s", userID, g.ID)
			} else if err != nil {
				return err
			}
			switch m.OrderState {
			case orderly.StatePendingPayment:
				unpaid = m.OrderID
				return nil
			case orderly.StatePaid:
			default:
				return orderly.Errorf(orderly.ECONFLICT, "member order %s is %s; retry", m.OrderID, m.OrderState)
			}
			changed, err := s.cfg.Orders.Machine().Transition(ctx, tx, s.flow, &store.OrdersTransitionParams{
				IDs: []string{m.OrderID}, From: orderly.StatePaid, Event: EventLeave, Now: now,
				Cause: fmt.Sprintf("user %s left group %s", userID, g.ID), Actor: actor, TraceID: traceID,
			}, nil)
			if err != nil {
				return err
			} else if len(changed) != 1 {
				return orderly.Errorf(orderly.ECONFLICT, "member order %s changed concurrently; retry", m.OrderID)
			}
			if ok, err := tx.GroupAddPaid(ctx, g.ID, -1, []orderly.GroupState{orderly.GroupForming}); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("group %s: no paid member to count out", g.ID)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("leave group %s: %w", groupID, err)
		}
		if unpaid == "" {
			s.cfg.Signals.OutboxWritten()
		} else {
			_, err = s.cfg.Orders.CancelOrder(ctx, unpaid, actor, traceID)
			if orderly.ErrorCode(err) == orderly.EILLEGAL && round < leaveRounds {
				continue // paid meanwhile: leave as a paid member
			} else if err != nil {
				return nil, fmt.Errorf("leave group %s: %w", groupID, err)
			}
		}
		if err := s.endIfEmpty(ctx, groupID); err != nil {
			return nil, fmt.Errorf("leave group %s: %w", groupID, err)
		}
		return s.Group(ctx, groupID)
	}
}

// endIfEmpty fails forming group id when no member holds a seat any more (its last member
// left): a group nobody is in must not stay forming, open to joins, until its deadline.
// It runs after the leave's own transaction (an unpaid member's seat is freed by its
// cancel, which never takes the group row); a join that took the seat meanwhile keeps the
// group forming.
func (s *Service) endIfEmpty(ctx context.Context, id string) error {
	return s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		g, err := tx.GroupLock(ctx, id)
		if err != nil || g.State != orderly.GroupForming || g.SeatsTaken > 0 {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		_, err = tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: id, From: orderly.GroupForming, To: orderly.GroupFailed, At: now})
		return err
	})
}
