// Package admin is the operator's service behind the admin routes (docs/operations/admin-page.md): the order search with keyset pagination, dead letters (list, re-drive one
// or by filter, discard with a reason), job runs, the audit of operator actions and
// reconciliation (package reconcile). Every change it makes is written to operator_actions
// in the transaction of the change: who (a name), what, on which target, why, trace id.
package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/store"
)

// Page sizes of the lists: DefaultLimit when none is asked, never more than MaxLimit.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// RedriveBatch bounds one transaction of a re-drive by filter.
	RedriveBatch = 500
)

// Actions written to operator_actions.
const (
	ActionRedrive = "redrive"
	ActionDiscard = "discard"
)

// Actor is who acts and under which trace; Operator defaults to "admin".
type Actor = reconcile.Actor

// Config configures a Service.
type Config struct {
	Store store.Store // required
	// Reconciler serves the per-order reconciliation and the reports; required.
	Reconciler *reconcile.Reconciler
	// Signals is told of outbox messages written (the relay); nil drops them.
	Signals orderly.Signals
	// Flows are the engine's flows: an order search by a flow or a state none of them has
	// is refused (EINVALID) instead of answering an empty page. nil: not checked.
	Flows orderly.Flows
	// Jobs are the names of the periodic jobs: a job-run listing by another name is
	// refused (EINVALID). Empty: not checked.
	Jobs []string
	// Lateness is the close lateness histogram that Overview reports
	// (telemetry.Metrics.CloseLateness, by trigger); nil leaves it out.
	Lateness prometheus.Collector
}

// Service is the operator's service. Safe for concurrent use.
type Service struct {
	cfg Config
}

// New returns a Service; an error when a required field is missing.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Reconciler == nil {
		return nil, errors.New("admin: Store and Reconciler are required")
	}
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	return &Service{cfg: cfg}, nil
}

// limit returns n bounded to 1 … MaxLimit, DefaultLimit for 0; EINVALID when negative.
func limit(n int) (int, error) {
	switch {
	case n < 0:
		return 0, orderly.Errorf(orderly.EINVALID, "limit must be between 1 and %d", MaxLimit)
	case n == 0:
		return DefaultLimit, nil
	}
	return min(n, MaxLimit), nil
}

// SearchOrders returns one page of orders matching p (filters as store.OrderSearchParams,
// p.AfterID the cursor's key), by id, and the key to start the next page after ("" when
// this page is the last). Errors: EINVALID for a negative limit or a range whose end is
// not after its start.
func (s *Service) SearchOrders(ctx context.Context, p store.OrderSearchParams) ([]*orderly.Order, string, error) {
	n, err := limit(p.Limit)
	if err != nil {
		return nil, "", err
	}
	if err := s.checkFlowState(p.Flow, p.State); err != nil {
		return nil, "", err
	}
	if !p.CreatedFrom.IsZero() && !p.CreatedTo.IsZero() && !p.CreatedTo.After(p.CreatedFrom) ||
		!p.ClosedFrom.IsZero() && !p.ClosedTo.IsZero() && !p.ClosedTo.After(p.ClosedFrom) {
		return nil, "", orderly.Errorf(orderly.EINVALID, "a time range's end must be after its start")
	}
	p.Limit = n + 1 // one more tells whether there is a next page
	var os []*orderly.Order
	if err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		os, err = tx.OrderSearch(ctx, &p)
		return err
	}); err != nil {
		return nil, "", fmt.Errorf("admin: search orders: %w", err)
	}
	if len(os) <= n {
		return os, "", nil
	}
	return os[:n], os[n-1].ID, nil
}

// checkFlowState refuses a flow that is not registered and a state that no flow (or not
// the given flow) has, naming the ones there are.
func (s *Service) checkFlowState(flow string, state orderly.State) error {
	if s.cfg.Flows == nil {
		return nil
	}
	flows := slices.Collect(maps.Values(s.cfg.Flows))
	if flow != "" {
		f, ok := s.cfg.Flows[flow]
		if !ok {
			return orderly.Errorf(orderly.EINVALID, "flow: %q is not a flow of this engine (%s)", flow,
				strings.Join(s.cfg.Flows.Names(), ", "))
		}
		flows = []*orderly.Flow{f}
	}
	if state == "" {
		return nil
	}
	var states []string
	for _, f := range flows {
		for _, st := range f.States() {
			if st == state {
				return nil
			}
			states = append(states, string(st))
		}
	}
	slices.Sort(states)
	return orderly.Errorf(orderly.EINVALID, "state: %q is not a state of %s (%s)", state,
		cmp.Or(flow, "any flow"), strings.Join(slices.Compact(states), ", "))
}

// OrderDetail is one order with its audit trail and the operator actions on it.
type OrderDetail struct {
	Order       *orderly.Order
	Transitions []*orderly.Transition
	Actions     []*store.OperatorAction
}

// Order returns one order, its audit trail (oldest first) and the last MaxLimit operator
// actions on it (newest first). ENOTFOUND when there is no such order.
func (s *Service) Order(ctx context.Context, id string) (*OrderDetail, error) {
	d := &OrderDetail{}
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		if d.Order, err = tx.OrderGet(ctx, id); err != nil {
			return err
		}
		if d.Transitions, err = tx.TransitionList(ctx, id); err != nil {
			return err
		}
		d.Actions, err = tx.OperatorActionList(ctx, &store.OperatorActionListParams{Target: id, Limit: MaxLimit})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("admin: order %s: %w", id, err)
	}
	return d, nil
}

// DeadLetters returns one page of dead messages matching f (f.AfterID the cursor's key),
// by id, and the key to start the next page after (0 when this page is the last).
func (s *Service) DeadLetters(ctx context.Context, f store.OutboxFilter) ([]*orderly.Message, int64, error) {
	n, err := limit(f.Limit)
	if err != nil {
		return nil, 0, err
	}
	f.Limit = n + 1
	var ms []*orderly.Message
	if err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		ms, err = tx.OutboxDeadList(ctx, &f)
		return err
	}); err != nil {
		return nil, 0, fmt.Errorf("admin: dead letters: %w", err)
	}
	if len(ms) <= n {
		return ms, 0, nil
	}
	return ms[:n], ms[n-1].ID, nil
}

// messageDetail is what the audit keeps of a message: enough to re-create a discarded one.
func messageDetail(m *orderly.Message) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"topic": m.Topic, "key": m.Key, "message_id": m.MessageID,
		"sequence": m.Sequence, "attempts": m.Attempts, "last_error": m.LastError, "payload": m.Payload})
	return b
}

// Redrive makes dead message id pending again (attempts 0, due now on the database clock)
// and audits it. ENOTFOUND when there is no dead message with that id (none, or not dead).
func (s *Service) Redrive(ctx context.Context, id int64, by Actor) error {
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		ms, err := tx.OutboxDeadList(ctx, &store.OutboxFilter{AfterID: id - 1, Limit: 1})
		if err != nil {
			return err
		}
		if len(ms) != 1 || ms[0].ID != id {
			return orderly.Errorf(orderly.ENOTFOUND, "dead message %d not found", id)
		}
		return s.redrive(ctx, tx, ms[0], "", by)
	})
	if err != nil {
		return fmt.Errorf("admin: re-drive message %d: %w", id, err)
	}
	s.cfg.Signals.OutboxWritten()
	return nil
}

// redrive re-drives one dead message in tx and audits it; a message re-driven meanwhile
// is skipped.
func (s *Service) redrive(ctx context.Context, tx store.Tx, m *orderly.Message, reason string, by Actor) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	ok, err := tx.OutboxRedrive(ctx, m.ID, now)
	if err != nil || !ok {
		return err
	}
	return tx.OperatorActionInsert(ctx, &store.OperatorAction{At: now, Operator: cmp.Or(by.Operator, "admin"),
		Action: ActionRedrive, Target: strconv.FormatInt(m.ID, 10), Reason: reason, Detail: messageDetail(m), TraceID: by.TraceID})
}

// RedriveWhere re-drives every dead message matching f (topic, created range; AfterID and
// Limit are ignored), in transactions of RedriveBatch messages, each audited; it returns
// how many it re-drove.
func (s *Service) RedriveWhere(ctx context.Context, f store.OutboxFilter, by Actor) (int, error) {
	f.AfterID, f.Limit = 0, RedriveBatch
	total := 0
	for {
		var ms []*orderly.Message
		err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			var err error
			if ms, err = tx.OutboxDeadList(ctx, &f); err != nil {
				return err
			}
			for _, m := range ms {
				if err := s.redrive(ctx, tx, m, "re-drive by filter", by); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("admin: re-drive by filter: %w", err)
		}
		total += len(ms)
		if len(ms) > 0 {
			s.cfg.Signals.OutboxWritten()
			f.AfterID = ms[len(ms)-1].ID
		}
		if len(ms) < RedriveBatch {
			return total, nil
		}
	}
}

// Discard deletes dead message id for good; the audit row keeps the message (topic, key,
// payload) and the reason. Errors: EINVALID without a reason; ENOTFOUND when there is no
// dead message with that id.
func (s *Service) Discard(ctx context.Context, id int64, reason string, by Actor) error {
	if reason == "" {
		return orderly.Errorf(orderly.EINVALID, "a discard needs a reason")
	}
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		m, err := tx.OutboxDiscard(ctx, id)
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.OperatorActionInsert(ctx, &store.OperatorAction{At: now, Operator: cmp.Or(by.Operator, "admin"),
			Action: ActionDiscard, Target: strconv.FormatInt(id, 10), Reason: reason, Detail: messageDetail(m), TraceID: by.TraceID})
	})
	if err != nil {
		return fmt.Errorf("admin: discard message %d: %w", id, err)
	}
	return nil
}

// JobRuns returns up to n runs of job ("" for every job), newest first.
func (s *Service) JobRuns(ctx context.Context, job string, n int) ([]*store.JobRun, error) {
	n, err := limit(n)
	if err != nil {
		return nil, err
	}
	if job != "" && len(s.cfg.Jobs) > 0 && !slices.Contains(s.cfg.Jobs, job) {
		return nil, orderly.Errorf(orderly.EINVALID, "job: %q is not a job of this engine (%s)", job, strings.Join(s.cfg.Jobs, ", "))
	}
	var runs []*store.JobRun
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		runs, err = tx.JobRunList(ctx, job, n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("admin: job runs: %w", err)
	}
	return runs, nil
}

// Actions returns one page of operator actions, newest first (on target when set), before
// id beforeID when > 0, and the id to continue before (0 when this page is the last).
func (s *Service) Actions(ctx context.Context, target string, beforeID int64, n int) ([]*store.OperatorAction, int64, error) {
	n, err := limit(n)
	if err != nil {
		return nil, 0, err
	}
	var as []*store.OperatorAction
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		as, err = tx.OperatorActionList(ctx, &store.OperatorActionListParams{Target: target, BeforeID: beforeID, Limit: n + 1})
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("admin: operator actions: %w", err)
	}
	if len(as) <= n {
		return as, 0, nil
	}
	return as[:n], as[n-1].ID, nil
}

// ReconcileOrder returns the findings about one order (reconcile.Reconciler.CheckOrder).
func (s *Service) ReconcileOrder(ctx context.Context, id string) ([]*reconcile.Finding, error) {
	return s.cfg.Reconciler.CheckOrder(ctx, id)
}

// RepairOrder repairs what it can about one order, audited under by
// (reconcile.Reconciler.RepairOrder).
func (s *Service) RepairOrder(ctx context.Context, id string, by Actor) ([]*reconcile.Finding, error) {
	by.Operator = cmp.Or(by.Operator, "admin")
	return s.cfg.Reconciler.RepairOrder(ctx, id, by)
}

// Reports returns up to n reconciliation reports, newest first.
func (s *Service) Reports(ctx context.Context, n int) ([]*store.ReconcileReport, error) {
	n, err := limit(n)
	if err != nil {
		return nil, err
	}
	var rs []*store.ReconcileReport
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		rs, err = tx.ReconcileReportList(ctx, n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("admin: reconcile reports: %w", err)
	}
	return rs, nil
}

// Age is how long ago t was, at now, in whole milliseconds (never negative).
func Age(t, now time.Time) int64 { return max(now.Sub(t).Milliseconds(), 0) }
