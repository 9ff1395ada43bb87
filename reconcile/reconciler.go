package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

// Defaults of Config.
const (
	DefaultBatchSize        = 500
	DefaultOverdueTolerance = time.Minute
	DefaultStuckAfter       = 10 * time.Minute
	// DefaultRefundStuckAfter is how old a refund the provider accepted and never
	// confirmed must be to be a finding (KindRefundStuck): a day, past the hours a
	// provider's refund normally takes to settle.
	DefaultRefundStuckAfter = 24 * time.Hour
	// DefaultInterval is the period of the reconciliation job: daily.
	DefaultInterval = 24 * time.Hour
)

// OperatorReconcile is the operator recorded for the repairs of the job and the CLI.
const OperatorReconcile = "reconcile"

// Refunder requests the refund of a payment its closed order does not keep, in tx
// (payment.Service implements it).
type Refunder interface {
	RefundUnkept(ctx context.Context, tx store.Tx, paymentID string, now time.Time) (bool, error)
}

// Config configures a Reconciler. Zero values mean the documented defaults.
type Config struct {
	Store store.Store // required
	// Machine applies the release effects of a closed order that still holds (required).
	Machine *order.Machine
	// Payments refunds payments kept by closed orders (required).
	Payments Refunder
	// CloseDue runs the closer's claim-and-close pass (closer.Closer.CloseDue with a
	// trigger); nil leaves overdue orders as findings.
	CloseDue func(ctx context.Context) error
	// Signals is told of outbox messages written (the relay); nil drops them.
	Signals orderly.Signals
	// BatchSize bounds the rows of one scan batch: DefaultBatchSize (500).
	BatchSize int
	// OverdueTolerance is how far past close_at an open order must be to be a finding:
	// DefaultOverdueTolerance (1 min), well past the sweep interval (15 s).
	OverdueTolerance time.Duration
	// StuckAfter is how long past due a pending message must be to be a finding:
	// DefaultStuckAfter (10 min).
	StuckAfter time.Duration
	// RefundStuckAfter is how long after its creation a refund still requested, whose
	// provider answered a non-final state, must be to be a finding (KindRefundStuck):
	// DefaultRefundStuckAfter (24 h).
	RefundStuckAfter time.Duration
	// Checks are more checks, run after the built-in ones (other packages' kinds).
	Checks []Check
	// Registerer receives orderly_reconcile_findings{kind} (findings of the last full run)
	// and orderly_reconcile_repairs_total{kind}; nil registers nowhere.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Reconciler finds and repairs disagreements between orders, payments, stock, coupons and
// the outbox (docs/operations/reconcile.md). Repairs go through the services and the state
// machine, never around them, and each is audited in operator_actions. Safe for
// concurrent use.
type Reconciler struct {
	cfg          Config
	checks       []Check
	findings     *prometheus.GaugeVec
	repairs      *prometheus.CounterVec
	repairErrors *prometheus.CounterVec
}

// New returns a Reconciler; it returns an error when a required field is missing or the
// metrics cannot be registered.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Store == nil || cfg.Machine == nil || cfg.Payments == nil {
		return nil, errors.New("reconcile: Store, Machine and Payments are required")
	}
	if cfg.BatchSize < 0 || cfg.OverdueTolerance < 0 || cfg.StuckAfter < 0 || cfg.RefundStuckAfter < 0 {
		return nil, errors.New("reconcile: BatchSize, OverdueTolerance, StuckAfter and RefundStuckAfter must not be negative")
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.OverdueTolerance = cmp.Or(cfg.OverdueTolerance, DefaultOverdueTolerance)
	cfg.StuckAfter = cmp.Or(cfg.StuckAfter, DefaultStuckAfter)
	cfg.RefundStuckAfter = cmp.Or(cfg.RefundStuckAfter, DefaultRefundStuckAfter)
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	r := &Reconciler{
		cfg:    cfg,
		checks: append(builtinChecks(), cfg.Checks...),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orderly_reconcile_findings",
			Help: "Findings of the last full reconciliation run, by kind."}, []string{"kind"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orderly_reconcile_repairs_total",
			Help: "Reconciliation repairs that changed something, by kind."}, []string{"kind"}),
		repairErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orderly_reconcile_repair_errors_total",
			Help: "Reconciliation repairs that failed (the finding stays, with its error), by kind."}, []string{"kind"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.findings, r.repairs, r.repairErrors} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("reconcile: register metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Kinds returns the kinds of every check, built-in first.
func (r *Reconciler) Kinds() []Kind {
	out := make([]Kind, len(r.checks))
	for i, c := range r.checks {
		out[i] = c.Kind
	}
	return out
}

// RunOptions are the options of Run.
type RunOptions struct {
	Repair bool
	// Since, when set, skips orders and payments created before it (their ids are
	// time-ordered UUIDv7; see sinceID). Stock and outbox checks always look at everything.
	Since time.Time
	By    Actor
}

// Run runs every check over the whole database (a full scan, in keyset batches) and,
// with Repair, repairs what it can. It sets orderly_reconcile_findings from what it found.
// Errors: a scan or repair that failed (wrapped with its kind); the report so far is
// returned with it.
func (r *Reconciler) Run(ctx context.Context, opts RunOptions) (*Report, error) {
	rep := &Report{Findings: []*Finding{}, StartedAt: time.Now().UTC()}
	byKind := map[Kind]int{}
	for _, c := range r.checks {
		if c.Scan == nil {
			continue
		}
		n, err := c.Scan(ctx, r, opts.Since, func(f *Finding) {
			rep.Findings = append(rep.Findings, f)
			byKind[f.Kind]++
		})
		rep.Scanned += n
		if err != nil {
			rep.FinishedAt = time.Now().UTC()
			return rep, fmt.Errorf("reconcile: %s: %w", c.Kind, err)
		}
	}
	if opts.Repair {
		rep.RepairErrors = int64(r.repair(ctx, rep.Findings, opts.By))
	}
	for _, c := range r.checks {
		r.findings.WithLabelValues(string(c.Kind)).Set(float64(byKind[c.Kind]))
	}
	rep.Repaired = countRepaired(rep.Findings)
	rep.FinishedAt = time.Now().UTC()
	return rep, nil
}

func countRepaired(fs []*Finding) int64 {
	var n int64
	for _, f := range fs {
		if f.Repaired {
			n++
		}
	}
	return n
}

// repairOrder is the order in which kinds are repaired: stock counters first, so that a
// closed order's release, repaired next, moves counters that agree with the reservations
// (a held reservation of a closed order whose SKU's held counter was already 0 could not
// be released before the counter was corrected: the CHECK held >= 0 refused it). Kinds not
// listed follow in the order they were found.
var repairOrder = map[Kind]int{KindStockMismatch: -1}

// repair repairs each finding whose check has a repair (stock counters first, see
// repairOrder); findings whose repair changed nothing stay Repaired=false. A repair that
// fails does not stop the others: its finding keeps the error (Finding.Error), which is
// logged and counted in orderly_reconcile_repair_errors_total{kind}; the count of failed
// repairs is returned.
func (r *Reconciler) repair(ctx context.Context, fs []*Finding, by Actor) int {
	by.Operator = cmp.Or(by.Operator, OperatorReconcile)
	ordered := slices.Clone(fs)
	slices.SortStableFunc(ordered, func(a, b *Finding) int { return cmp.Compare(repairOrder[a.Kind], repairOrder[b.Kind]) })
	wake, failed := false, 0
	for _, f := range ordered {
		c := r.check(f.Kind)
		if c == nil || c.Repair == nil {
			continue
		}
		ok, err := c.Repair(ctx, r, f, by)
		if err != nil {
			if ctx.Err() != nil {
				f.Error = ctx.Err().Error()
				failed++
				continue
			}
			f.Error = err.Error()
			failed++
			r.repairErrors.WithLabelValues(string(f.Kind)).Inc()
			r.cfg.Logger.ErrorContext(ctx, "reconciliation repair failed", "kind", f.Kind, "order_id", f.OrderID, "sku", f.SKU,
				"target", f.Target, "error", err)
			continue
		}
		if ok {
			f.Repaired = true
			wake = true
			r.repairs.WithLabelValues(string(f.Kind)).Inc()
			r.cfg.Logger.InfoContext(ctx, "reconciliation repair", "kind", f.Kind, "order_id", f.OrderID, "sku", f.SKU,
				"operator", by.Operator)
		}
	}
	if wake {
		r.cfg.Signals.OutboxWritten()
	}
	return failed
}

func (r *Reconciler) check(k Kind) *Check {
	for i := range r.checks {
		if r.checks[i].Kind == k {
			return &r.checks[i]
		}
	}
	return nil
}

// CheckOrder compares one order with its payments, reservations, coupon, the stock of its
// SKUs and its undelivered messages, in one read transaction, and returns the findings
// (never nil). Errors: ENOTFOUND for an unknown order; driver errors.
func (r *Reconciler) CheckOrder(ctx context.Context, orderID string) ([]*Finding, error) {
	var s *Snapshot
	err := r.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		s, err = snapshot(ctx, tx, orderID)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := []*Finding{}
	for _, c := range r.checks {
		if c.Order != nil {
			out = append(out, c.Order(r, s)...)
		}
	}
	return out, nil
}

// RepairOrder runs CheckOrder and repairs what it can, audited under by; it returns the
// findings with Repaired set on those it repaired. Errors: those of CheckOrder and of the
// repairs.
func (r *Reconciler) RepairOrder(ctx context.Context, orderID string, by Actor) ([]*Finding, error) {
	fs, err := r.CheckOrder(ctx, orderID)
	if err != nil {
		return nil, err
	}
	r.repair(ctx, fs, by)
	return fs, nil
}

// snapshot reads one order and what the per-order checks compare it with.
func snapshot(ctx context.Context, tx store.Tx, orderID string) (*Snapshot, error) {
	s := &Snapshot{}
	var err error
	if s.Now, err = tx.Now(ctx); err != nil {
		return nil, err
	}
	if s.Order, err = tx.OrderGet(ctx, orderID); err != nil {
		return nil, err
	}
	open, err := tx.OrdersOpen(ctx, &store.OrdersOpenParams{IDs: []string{orderID}})
	if err != nil {
		return nil, err
	}
	if len(open) == 1 {
		s.Open = open[0]
	}
	if s.Payments, err = tx.PaymentList(ctx, orderID); err != nil {
		return nil, err
	}
	if s.Reservations, err = tx.ReservationList(ctx, orderID); err != nil {
		return nil, err
	}
	if s.Order.CouponID != "" {
		if s.Coupon, err = tx.CouponGet(ctx, s.Order.CouponID); err != nil && orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return nil, err
		}
	}
	if s.Messages, err = tx.OutboxKeyUndelivered(ctx, orderID, 100); err != nil {
		return nil, err
	}
	for _, p := range s.Payments { // the gateway commands, keyed by payment id
		msgs, err := tx.OutboxKeyUndelivered(ctx, p.ID, 100)
		if err != nil {
			return nil, err
		}
		s.Messages = append(s.Messages, msgs...)
	}
	if s.Refunds, err = tx.RefundList(ctx, orderID); err != nil {
		return nil, err
	}
	for _, res := range s.Reservations {
		l, err := tx.StockLedgerGet(ctx, res.SKU)
		if err != nil {
			return nil, err
		}
		s.Stock = append(s.Stock, l)
	}
	return s, nil
}

// audit records one repair in operator_actions, in the repair's transaction.
func audit(ctx context.Context, tx store.Tx, by Actor, f *Finding, target string, now time.Time, detail any) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("audit %s: %w", f.Kind, err)
	}
	return tx.OperatorActionInsert(ctx, &store.OperatorAction{At: now, Operator: by.Operator, Action: "repair:" + string(f.Kind),
		Target: target, Reason: f.Detail, Detail: b, TraceID: by.TraceID})
}

// OverdueTolerance is Config.OverdueTolerance: how far past its deadline a timed thing
// must be to be a finding.
func (r *Reconciler) OverdueTolerance() time.Duration { return r.cfg.OverdueTolerance }

// RepairInTx is the frame of a Check's Repair in another package: it runs fn in a write
// transaction behind by's fence, with the database's now, and when fn reports a change it
// audits it in operator_actions in the same transaction (target names what changed, detail
// is stored as JSON). It reports whether fn changed something; errors are fn's and the
// store's.
func (r *Reconciler) RepairInTx(ctx context.Context, by Actor, f *Finding, target string,
	fn func(tx store.Tx, now time.Time) (changed bool, detail any, err error)) (bool, error) {
	var changed bool
	err := r.inTx(ctx, by, func(tx store.Tx, now time.Time) error {
		var (
			detail any
			err    error
		)
		if changed, detail, err = fn(tx, now); err != nil || !changed {
			return err
		}
		return audit(ctx, tx, by, f, target, now, detail)
	})
	return changed && err == nil, err
}

// Read runs fn in one read transaction of the reconciler's store.
func (r *Reconciler) Read(ctx context.Context, fn func(tx store.Tx) error) error {
	return r.cfg.Store.Read(ctx, fn)
}

// inTx runs fn in a write transaction behind by's fence, with the database's now.
func (r *Reconciler) inTx(ctx context.Context, by Actor, fn func(tx store.Tx, now time.Time) error) error {
	return r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		if by.Fence != nil {
			if err := by.Fence(ctx, tx); err != nil {
				return err
			}
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return fn(tx, now)
	})
}

// Job returns the body of the periodic reconciliation job (package job, under its lease):
// a full run, repairing when repair is set, whose report is written to reconcile_reports
// (fenced); the job run records the rows scanned and the repairs made.
func (r *Reconciler) Job(instance string, repair bool) job.Func {
	return func(ctx context.Context, fence job.Fence) (int64, int64, error) {
		rep, err := r.Run(ctx, RunOptions{Repair: repair, By: Actor{Operator: OperatorReconcile, Fence: fence}})
		if rep == nil {
			return 0, 0, err
		}
		if werr := r.SaveReport(ctx, instance, rep, fence); werr != nil {
			err = errors.Join(err, werr)
		}
		if n := len(rep.Findings); n > 0 {
			r.cfg.Logger.WarnContext(ctx, "reconciliation findings", "findings", n, "repaired", rep.Repaired)
		}
		return rep.Scanned, rep.Repaired, err
	}
}

// SaveReport writes rep to reconcile_reports; fence, when set, is called first.
func (r *Reconciler) SaveReport(ctx context.Context, instance string, rep *Report, fence job.Fence) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("reconcile: report: %w", err)
	}
	return r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		if fence != nil {
			if err := fence(ctx, tx); err != nil {
				return err
			}
		}
		return tx.ReconcileReportInsert(ctx, &store.ReconcileReport{Instance: instance, StartedAt: rep.StartedAt,
			FinishedAt: rep.FinishedAt, Findings: int64(len(rep.Findings)), Repaired: rep.Repaired, Report: b})
	})
}

// sinceID returns the smallest id that a UUIDv7 minted at t or later can have, as a
// keyset start ("" for the zero time): the 48-bit unix-millisecond prefix of t, the rest
// zero (a real id's version nibble 7 sorts after it).
func sinceID(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	ms := max(t.UnixMilli(), 0)
	return fmt.Sprintf("%08x-%04x-0000-0000-000000000000", uint64(ms)>>16, uint64(ms)&0xffff)
}
