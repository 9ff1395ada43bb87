package saga

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orderlyhq/orderly/store"
)

// Call is what a participant receives for one attempt.
type Call struct {
	SagaID     string          `json:"saga_id"`
	Definition string          `json:"definition"`
	Step       int             `json:"step"`      // index in the definition, 0-based
	StepName   string          `json:"step_name"` //
	Phase      Phase           `json:"phase"`
	Attempt    int             `json:"attempt"` // 1-based, per step and phase
	Input      json.RawMessage `json:"input"`   // the saga's input, as given to Run or Begin
	// IdempotencyKey is the operation's key (IdempotencyKey): the same on every attempt.
	IdempotencyKey string `json:"idempotency_key"`

	carried, kept any // Carried, Keep: values of one LocalTx run, never sent
}

// Keep leaves v for the actions after this one in the same LocalTx run (one transaction,
// see LocalTx): their Carried returns it once this attempt has succeeded. A value kept by
// an attempt that fails is dropped, and a run turning to compensation drops what was kept.
// Nothing crosses transactions: an action that runs in a later one (a retry, a resume
// after a crash or after a remote step) finds Carried nil and reads the store. What is kept
// must describe the rows as this run wrote them, and the actions that take it must not
// change it.
func (c *Call) Keep(v any) { c.kept = v }

// Carried returns the value last kept (Keep) by an earlier action of the same LocalTx run,
// or nil: for a compensation, for a participant outside the recording transaction, and
// for the first action of a run.
func (c *Call) Carried() any { return c.carried }

// Participant is an action or a compensation. Build one with LocalTx, Local or HTTP. Its
// error decides the attempt's outcome: nil is success, Business(err) a definitive failure,
// anything else transient.
type Participant interface {
	// call runs one attempt; tx is the recording transaction for LocalTx, nil otherwise.
	call(ctx context.Context, tx store.Tx, c *Call) error
	// inTx reports whether the participant runs in the recording transaction.
	inTx() bool
}

// LocalTx is a participant that runs fn in the orchestrator's transaction that records the
// attempt's outcome and claims the next step: its writes commit exactly when the step is
// recorded, so it needs no barrier. fn runs in a savepoint: when it returns an error its
// writes roll back and the failure is recorded in the same transaction. Consecutive
// LocalTx steps (or compensations) whose attempts are claimed at once run in one
// transaction. fn must finish within the step's Timeout (its context's deadline). The step
// log rows of such a run are written together, before its first compensation and at its
// end: an action's fn does not read the rows of the actions before it in its run (a
// compensation's fn reads them all), nor, in a new saga's first run, the instance row.
func LocalTx(fn func(ctx context.Context, tx store.Tx, c *Call) error) Participant {
	return localTx(fn)
}

type localTx func(ctx context.Context, tx store.Tx, c *Call) error

func (f localTx) call(ctx context.Context, tx store.Tx, c *Call) error { return f(ctx, tx, c) }
func (localTx) inTx() bool                                             { return true }

// Around returns p with each attempt run by fn, which runs p's attempt by calling next (or
// does not): a decorator for Config.Wrap (tracing, a test kit's fault injection). It runs
// in p's place, in the recording transaction when p does.
func Around(p Participant, fn func(ctx context.Context, c *Call, next func(context.Context) error) error) Participant {
	return &around{p: p, fn: fn}
}

type around struct {
	p  Participant
	fn func(ctx context.Context, c *Call, next func(context.Context) error) error
}

func (a *around) inTx() bool { return a.p.inTx() }

func (a *around) call(ctx context.Context, tx store.Tx, c *Call) error {
	return a.fn(ctx, c, func(ctx context.Context) error { return a.p.call(ctx, tx, c) })
}

// Local is a participant that runs fn outside the orchestrator's transactions, typically
// with its own database handle and package barrier keyed by c.IdempotencyKey's parts, so
// that a retry after a lost answer is a no-op and a compensation that overtakes its
// action wins. The outcome is recorded after fn returns; the orchestrator waits for fn
// even past the step's Timeout (it cannot stop a Go function), so fn should honour ctx.
func Local(fn func(ctx context.Context, c *Call) error) Participant { return local(fn) }

type local func(ctx context.Context, c *Call) error

func (f local) call(ctx context.Context, _ store.Tx, c *Call) error { return f(ctx, c) }
func (local) inTx() bool                                            { return false }

// HTTPConfig configures a remote participant.
type HTTPConfig struct {
	// Name names the participant: its circuit breaker and its errors. Required.
	Name string
	// URL receives a POST of the Call as JSON, with header Idempotency-Key. Required.
	URL string
	// Client sends the requests; http.DefaultClient when nil. The attempt's context
	// (Step.Timeout) bounds each request.
	Client *http.Client
	// BreakerFailures is how many transient failures in a row open the breaker; 5.
	BreakerFailures uint32
	// BreakerOpen is how long an open breaker refuses calls (each refused call is a
	// transient failure) before it lets one through; 30 s.
	BreakerOpen time.Duration
}

// HTTP returns a remote participant: 2xx is success; 409 and 422 are business failures;
// any other status, a network error, a timeout or an open circuit breaker is transient.
// Every participant built by HTTP has its own circuit breaker (github.com/sony/gobreaker/v2),
// which counts transient failures only. It returns an error when Name or URL is empty.
func HTTP(cfg HTTPConfig) (Participant, error) {
	if cfg.Name == "" || cfg.URL == "" {
		return nil, errors.New("saga: HTTP participant needs a Name and a URL")
	}
	failures := cmp.Or(cfg.BreakerFailures, 5)
	p := &remote{cfg: cfg, client: cmp.Or(cfg.Client, http.DefaultClient)}
	p.breaker = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        cfg.Name,
		Timeout:     cmp.Or(cfg.BreakerOpen, 30*time.Second),
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsSuccessful: func(err error) bool {
			return err == nil || IsBusiness(err)
		},
	})
	return p, nil
}

type remote struct {
	cfg     HTTPConfig
	client  *http.Client
	breaker *gobreaker.CircuitBreaker[struct{}]
}

func (*remote) inTx() bool { return false }

func (p *remote) call(ctx context.Context, _ store.Tx, c *Call) error {
	_, err := p.breaker.Execute(func() (struct{}, error) { return struct{}{}, p.post(ctx, c) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("participant %s: circuit breaker: %w", p.cfg.Name, err)
	}
	return err
}

func (p *remote) post(ctx context.Context, c *Call) error {
	body, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("participant %s: %w", p.cfg.Name, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return Business(fmt.Errorf("participant %s: %w", p.cfg.Name, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.IdempotencyKey)
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("participant %s: %w", p.cfg.Name, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusUnprocessableEntity:
		return Business(fmt.Errorf("participant %s: %s: %s", p.cfg.Name, resp.Status, bytes.TrimSpace(msg)))
	default:
		return fmt.Errorf("participant %s: %s: %s", p.cfg.Name, resp.Status, bytes.TrimSpace(msg))
	}
}
