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

	"github.com/orderlyhq/orderly/store"
)

// Defaults of Config.
const (
	DefaultOrders         = 1000
	DefaultRate           = 100.0
	DefaultPaymentTimeout = 3 * time.Second
	DefaultConcurrency    = 32
	DefaultDrain          = 30 * time.Second
)

// Config configures Run. Zero values mean the defaults.
type Config struct {
	// Target is the server's base URL, e.g. "http://127.0.0.1:8080". Required.
	Target string
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
	// HTTPClient sends the requests. Default: a client with a 30 s timeout and a pool of
	// keep-alive connections sized for Concurrency.
	HTTPClient *http.Client
	// Drain is how long after the last order's close_at the run waits at most for closes,
	// refunds, releases and the outbox to settle. Default DefaultDrain (30 s).
	Drain time.Duration
}

// withDefaults returns cfg with defaults applied, or an error saying what is invalid.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	if cfg.Target == "" {
		errs = append(errs, errors.New("target: is required"))
	} else if u, err := url.Parse(cfg.Target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("target: %q is not an http(s) URL", cfg.Target))
	}
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
	if len(errs) > 0 {
		return cfg, fmt.Errorf("simulate: invalid config: %w", errors.Join(errs...))
	}
	cfg.Target = strings.TrimRight(cfg.Target, "/")
	cfg.Orders = cmp.Or(cfg.Orders, DefaultOrders)
	cfg.Rate = cmp.Or(cfg.Rate, DefaultRate)
	cfg.PaymentTimeout = cmp.Or(cfg.PaymentTimeout, DefaultPaymentTimeout)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.Drain = cmp.Or(cfg.Drain, DefaultDrain)
	return cfg, nil
}

// timeoutSeconds is PaymentTimeout as sent: whole seconds, rounded up, at least 1.
func (cfg *Config) timeoutSeconds() int64 {
	s := int64((cfg.PaymentTimeout + time.Second - 1) / time.Second)
	return max(s, 1)
}
