package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/store"
)

// Defaults of Config.
const (
	DefaultOrders         = 1000
	DefaultRate           = 100.0
	DefaultPaymentTimeout = 3 * time.Second
	DefaultConcurrency    = 32
	DefaultDrain          = 30 * time.Second
	// DefaultMinPaidShare is `orderly simulate --min-paid-share`: a quiet run pays nearly
	// every buyer who meant to pay in time, a run whose payments were held past their
	// deadlines (issue 28: 1.5–3.5 % of orders paid against 35–55 %) far fewer than half.
	DefaultMinPaidShare = 0.5
	// DefaultRetryFor is Config.RetryFor with more than one target.
	DefaultRetryFor = 15 * time.Second
	// DefaultGroupTimeLimit is Config.GroupTimeLimit.
	DefaultGroupTimeLimit = 3 * time.Second
)

// Phases of a run, in order, as passed to Config.OnPhase and shown in progress lines.
const (
	PhaseSeed   = "seed"   // stock the SKUs, issue the coupons
	PhaseSend   = "send"   // send the orders and play their buyers
	PhaseSettle = "settle" // wait for every order, refund, release and the outbox to settle
	PhaseVerify = "verify" // verify.Check on Config.Store
)

// Config configures Run. Zero values mean the defaults.
type Config struct {
	// Targets are the base URLs of the servers, e.g. "http://127.0.0.1:8080": one, or
	// several instances that share one database. Requests go to them round robin; one that
	// gets no answer is sent to the next (see RetryFor). Required, unless Target is set.
	Targets []string
	// Target is the base URL of a single server, kept for compatibility: non-empty means
	// Targets = [Target] (setting both to different values is an error).
	Target string
	// APIKey, when set, is sent as "Authorization: Bearer <APIKey>" with every request: the
	// admin token, or an API key of scopes buyer and merchant, for servers that require one
	// (docs/operations/api-keys.md). Empty: no header (an open server).
	APIKey string
	// RetryFor is how long a request that got no answer (connection refused or reset: the
	// server died or restarts) keeps being sent again, to the next target each time, with a
	// short pause once every target failed. Order creations carry an Idempotency-Key, so a
	// create sent again never makes two orders; callbacks are idempotent; a payment start
	// sent again may start a second attempt, which the checks accept (never applied, its
	// buyer never pays it). Default 0 with one target (no retry) and DefaultRetryFor (15 s)
	// with several; negative never retries.
	RetryFor time.Duration
	// CallbackSecret signs the payment callbacks (payment.Sign); it must be the server's
	// callback secret, or every callback is refused with 401.
	CallbackSecret []byte
	// Orders is the number of orders to send. Default DefaultOrders (1000).
	Orders int
	// Rate is the sending pace in orders per second. Default DefaultRate (100).
	Rate float64
	// PaymentTimeout is each order's time to pay. It is sent as payment_timeout_seconds,
	// so it is rounded up to whole seconds, at least 1. Default DefaultPaymentTimeout (3 s).
	PaymentTimeout time.Duration
	// Seed seeds the rand that draws buyers, items, coupons and delays: the same seed
	// gives the same plan.
	Seed int64
	// Concurrency caps the HTTP requests in flight. Default DefaultConcurrency (32).
	Concurrency int
	// Store, when set, is the server's database: at the end the run waits for its outbox
	// to drain and adds the violations of verify.Check (with RequireDrained) to the result.
	Store store.Store
	// Progress, when set, receives one line per second: phase, orders sent, created,
	// rejected, paid, closed, … Nil prints nothing.
	Progress io.Writer
	// FailRate, SlowRate and TimeoutAfterApplyRate (shares 0 … 1) are the faults the
	// servers inject into saga participants (the ride-hailing gateway calls too), per call:
	// a transient failure before anything is done, a slow call, a call applied whose reply
	// is lost (internal/fault.Saga). `orderly simulate` starts its servers with them
	// (hidden `orderly simulate instance`); Run itself only checks that they are within 0 … 1.
	FailRate, SlowRate, TimeoutAfterApplyRate float64
	// HTTPClient sends the requests. Default: a client with a 30 s timeout and a pool of
	// keep-alive connections sized for Concurrency.
	HTTPClient *http.Client
	// Drain is how long after the last order's close_at the run waits at most for closes,
	// refunds, releases and the outbox to settle. Default DefaultDrain (30 s).
	Drain time.Duration
	// OnPhase, when set, is called with the name of each phase (PhaseSeed, …) as the run
	// enters it, on Run's goroutine; it must return quickly.
	OnPhase func(phase string)

	// MaxLateness, when positive, bounds closed_at − close_at of every order closed for
	// payment timeout: a later close is an I5 violation. Set it to what the precise timer
	// promises (its poll cap plus a margin), with the server's sweep far away, so that a
	// dead timer fails the run instead of being carried by the sweep. 0: no bound.
	MaxLateness time.Duration
	// MinCreatedShare, when positive, is the least share (0–1] of the orders sent that the
	// server must create: fewer is a violation. Refusals the plan explains (scarce stock,
	// contended coupons) stay well below 20 %. 0: no minimum.
	MinCreatedShare float64
	// MinPaidShare, when positive, is the least share (0–1] of the standard flow's buyers
	// who meant to pay in time whose order must end paid: fewer is a violation, since such
	// a run (a client queue or faults that held the payments past their deadlines) barely
	// tested payments, however clean its invariants. 0: no minimum.
	MinPaidShare float64
	// GatewayLedger, when set, returns every call the server's payment gateway received
	// (sim.Gateway.Ledger, when the server runs in this process): the run then
	// checks that every refunded payment was refunded exactly once, for its amount, and
	// nothing else was refunded.
	GatewayLedger func() []sim.GatewayCall
	// Provider, when set, stands for the server's payment provider: buyers' outcomes are
	// played at it and reach the server as its signed webhooks instead of orderly callbacks
	// (StripeProvider: `orderly simulate --gateway stripe`). The server must create its
	// attempts on that provider's channel.
	Provider Provider

	// Flows names the flows whose traffic the run drives, all at once: registered flow
	// drivers (RegisterFlow; ParseFlows turns "mixed" into all of them). They share Orders
	// evenly and Rate in proportion. Default [standard].
	Flows []string
	// GroupTimeLimit is the shortest group time limit of the group_buy flow's deals (whole
	// seconds, at least 2; deals draw theirs up to 2 s longer). Default
	// DefaultGroupTimeLimit (3 s).
	GroupTimeLimit time.Duration
	// VerifyFlows is the server's flow registry, given to verify.Check for its I6 and
	// per-flow checks. Default: verify's (orderly.DefaultFlows()).
	VerifyFlows orderly.Flows
}

// withDefaults returns cfg with defaults applied, or an error saying what is invalid.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	for _, r := range []float64{cfg.FailRate, cfg.SlowRate, cfg.TimeoutAfterApplyRate} {
		if !(r >= 0 && r <= 1) {
			errs = append(errs, errors.New("fault rates: FailRate, SlowRate and TimeoutAfterApplyRate must be within 0 and 1"))
			break
		}
	}
	cfg.Target = strings.TrimRight(cfg.Target, "/")
	targets := make([]string, len(cfg.Targets))
	for i, t := range cfg.Targets {
		targets[i] = strings.TrimRight(t, "/")
	}
	switch {
	case cfg.Target != "" && len(targets) == 0:
		targets = []string{cfg.Target}
	case cfg.Target != "" && (len(targets) != 1 || targets[0] != cfg.Target):
		errs = append(errs, errors.New("target: set Target or Targets, not both"))
	case len(targets) == 0:
		errs = append(errs, errors.New("target: is required"))
	}
	for _, t := range targets {
		if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("target: %q is not an http(s) URL", t))
		}
	}
	cfg.Targets = targets
	if cfg.Orders < 0 {
		errs = append(errs, errors.New("orders: must not be negative"))
	}
	if cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0) {
		errs = append(errs, errors.New("rate: must be a positive number of orders per second"))
	}
	if cfg.PaymentTimeout < 0 {
		errs = append(errs, errors.New("payment timeout: must not be negative"))
	}
	if cfg.Concurrency < 0 {
		errs = append(errs, errors.New("concurrency: must not be negative"))
	}
	if cfg.Drain < 0 {
		errs = append(errs, errors.New("drain: must not be negative"))
	}
	if cfg.MaxLateness < 0 {
		errs = append(errs, errors.New("max lateness: must not be negative"))
	}
	if cfg.GroupTimeLimit < 0 {
		errs = append(errs, errors.New("group time limit: must not be negative"))
	}
	for _, f := range cfg.Flows {
		if newDriver(f) == nil {
			errs = append(errs, fmt.Errorf("flows: %q is not a flow simulate knows (%v)", f, FlowNames()))
		}
	}
	if cfg.MinCreatedShare < 0 || cfg.MinCreatedShare > 1 || math.IsNaN(cfg.MinCreatedShare) {
		errs = append(errs, errors.New("min created share: must be between 0 and 1"))
	}
	if cfg.MinPaidShare < 0 || cfg.MinPaidShare > 1 || math.IsNaN(cfg.MinPaidShare) {
		errs = append(errs, errors.New("min paid share: must be between 0 and 1"))
	}
	if len(errs) > 0 {
		return cfg, fmt.Errorf("simulate: invalid config: %w", errors.Join(errs...))
	}
	cfg.Orders = cmp.Or(cfg.Orders, DefaultOrders)
	cfg.Rate = cmp.Or(cfg.Rate, DefaultRate)
	cfg.PaymentTimeout = cmp.Or(cfg.PaymentTimeout, DefaultPaymentTimeout)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.Drain = cmp.Or(cfg.Drain, DefaultDrain)
	cfg.GroupTimeLimit = cmp.Or(cfg.GroupTimeLimit, DefaultGroupTimeLimit)
	if len(cfg.Flows) == 0 {
		cfg.Flows = []string{orderly.FlowStandard}
	}
	if cfg.RetryFor == 0 && len(cfg.Targets) > 1 {
		cfg.RetryFor = DefaultRetryFor
	}
	return cfg, nil
}

// timeoutSeconds is PaymentTimeout as sent: whole seconds, rounded up, at least 1.
func (cfg *Config) timeoutSeconds() int64 {
	s := int64((cfg.PaymentTimeout + time.Second - 1) / time.Second)
	return max(s, 1)
}
