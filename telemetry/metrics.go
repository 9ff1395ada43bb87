// Package telemetry holds orderly's Prometheus metrics. Every component takes a *Metrics;
// a nil one is replaced by a private, unexported set, so tests need not build one.
package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the engine's Prometheus collectors, registered on Registry.
type Metrics struct {
	Registry *prometheus.Registry

	// OrdersCreated counts created orders by flow, once their transaction committed, whatever
	// path created them (order.Machine.Insert).
	OrdersCreated *prometheus.CounterVec
	// OrdersClosed counts orders closed, by flow, reason and trigger (the closer's timer,
	// sweep, deep_check, delay_queue, inspection; buyer, checkout, rider, …: the
	// transition's actor), once the close committed (order.Machine.Transition).
	OrdersClosed *prometheus.CounterVec
	// CloseLateness observes closed_at − close_at of orders closed at their deadline, in
	// seconds (the lateness of I5), by trigger (timer, sweep, deep_check, delay_queue,
	// inspection); buckets 1 ms … 60 s.
	CloseLateness *prometheus.HistogramVec
	// GroupLateness observes failed_at − deadline_at of group-buy groups failed at their
	// deadline, in seconds (group lateness).
	GroupLateness prometheus.Histogram
	// OverdueOrders counts orders the deep check found overdue by more than its tolerance:
	// each one means the timer and the sweep both missed it.
	OverdueOrders prometheus.Counter
	// CloserPasses counts claim-and-close passes by trigger.
	CloserPasses *prometheus.CounterVec
	// PaymentInspections counts inspections of in-flight payments by outcome.
	PaymentInspections *prometheus.CounterVec
	// Callbacks counts payment callbacks by status and result (applied, duplicate, refund,
	// refused).
	Callbacks *prometheus.CounterVec
	// CallbackRefusals counts refused signed callbacks by reason (orderly.Refusal*).
	CallbackRefusals *prometheus.CounterVec
	// ChannelNotifications counts verified notifications of payment channels (package
	// channel) by channel, kind and result (applied, duplicate, refund, refused, recorded).
	ChannelNotifications *prometheus.CounterVec
	// ChannelVersionMismatches counts verified notifications of another API version than the
	// one their channel pins, by channel and version (channel.Notification.UnexpectedVersion).
	ChannelVersionMismatches *prometheus.CounterVec
	// ChannelPayments counts attempts' outcomes (captured, failed) by channel and variant
	// ("" for a channel with one version), whichever way they arrived (signed callback,
	// channel notification, a failed create): the success rate of each channel and
	// gray-release variant is captured / all.
	ChannelPayments *prometheus.CounterVec
	// ChannelOutOfRotation counts channel variants taken out of rotation by the router
	// (their success rate stayed below the floor), by channel and variant.
	ChannelOutOfRotation *prometheus.CounterVec
	// ClosesDeferred counts closes deferred by channel: an order past its inspection hold
	// whose payment channel was unavailable (circuit breaker open) was kept open and will be
	// inspected again, never closed blindly (closer/closer.go).
	ClosesDeferred *prometheus.CounterVec
	// ChannelBreakerState is each channel's circuit breaker: 0 closed, 1 half-open, 2 open
	// (calls to the provider refused at once; closes of its orders wait in inspection).
	ChannelBreakerState *prometheus.GaugeVec
	// ClockOffset is the database clock minus this instance's clock, in seconds, as last
	// measured by the timer. The database clock decides what is due; a large offset only
	// makes the timer wake at the wrong moment until it is measured again.
	ClockOffset prometheus.Gauge
	// OutboxDelivered, OutboxRetried and OutboxDead count relay outcomes by topic.
	OutboxDelivered *prometheus.CounterVec
	OutboxRetried   *prometheus.CounterVec
	OutboxDead      *prometheus.CounterVec
	// DependencyUp is 1 while an optional dependency answers and 0 while it does not, by
	// dependency ("redis": the delay queue of --timer redis). The instance serves either
	// way; while the delay queue is down the database timer and the sweep close orders.
	DependencyUp *prometheus.GaugeVec
	// SagaAttempts counts attempts of saga steps by phase (action, compensation) and
	// outcome (succeeded, business_failure, transient, unknown, lost).
	SagaAttempts *prometheus.CounterVec
	// SagasEnded counts sagas that ended, by final state (succeeded, compensated).
	SagasEnded *prometheus.CounterVec
	// SagasStuck counts sagas moved to stuck: a compensation failed its maximum number of
	// attempts and waits for an admin re-drive (each one is an alert).
	SagasStuck prometheus.Counter

	// OrderTransitions counts applied order transitions by flow, from and to state: the
	// orders entering a state are sum by (to), those leaving it sum by (from). Counted in
	// the transition's transaction, so a transaction rolled back after it (rare: a failed
	// later step) counts too. Cheap: no table scan.
	OrderTransitions *prometheus.CounterVec
	// OutboxPending, OutboxDeadNow and OutboxOldestPendingAge are the outbox backlog as the
	// relay last measured it (every Config.StatsInterval of package outbox): pending and
	// dead messages, and the age in seconds of the oldest pending one (0 when none).
	OutboxPending          prometheus.Gauge
	OutboxDeadNow          prometheus.Gauge
	OutboxOldestPendingAge prometheus.Gauge
	// GatewayLatency observes payment gateway calls in seconds by operation (create, query,
	// cancel, refund) and outcome (ok, error); GatewayErrors counts the failed ones.
	GatewayLatency *prometheus.HistogramVec
	GatewayErrors  *prometheus.CounterVec
	// JobDuration observes periodic job runs in seconds by job and outcome (ok, error);
	// JobChanged counts what the runs changed or found, by job (for the deep check the
	// overdue orders it closed, for reconciliation its findings).
	JobDuration *prometheus.HistogramVec
	JobChanged  *prometheus.CounterVec
	// WebhookDeliveries counts merchant webhook delivery attempts by outcome (delivered,
	// failed, dropped: the subscriber was deleted).
	WebhookDeliveries *prometheus.CounterVec
	// RefundReversals counts refunds a provider failed after it had confirmed them (a Stripe
	// refund.updated with status failed), by channel and outcome: given_back (the order's
	// amount and items are refundable again) or operator_task (the order was already
	// refunded, a terminal state: reconciliation reports refund_mismatch, money owed).
	RefundReversals *prometheus.CounterVec
	// CreateQueueWaiting is how many creates of one-line orders wait in this instance for
	// their SKU's batch transaction, all SKUs; a SKU with order.Config.CreateQueue creates
	// waiting refuses its next ones 503 at once (load shedding).
	CreateQueueWaiting prometheus.Gauge
	// HTTPRequests counts the API's answers by method, route (the route pattern, such as
	// /v1/orders/{id}; "unmatched" for a path no route has) and status code;
	// HTTPRequestDuration observes them in seconds by method and route.
	HTTPRequests        *prometheus.CounterVec
	HTTPRequestDuration *prometheus.HistogramVec
}

// latencyBuckets are 1 ms … 60 s.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30, 60}

// NewMetrics returns a fresh set of collectors on a new registry that also holds the Go
// runtime and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		OrdersCreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_orders_created_total", Help: "Orders created, by flow.",
		}, []string{"flow"}),
		OrdersClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_orders_closed_total", Help: "Orders closed, by flow, close reason and trigger.",
		}, []string{"flow", "reason", "trigger"}),
		CloseLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orderly_close_lateness_seconds",
			Help:    "closed_at - close_at of orders closed at their deadline, by trigger.",
			Buckets: latencyBuckets,
		}, []string{"trigger"}),
		GroupLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orderly_group_lateness_seconds",
			Help:    "failed_at - deadline_at of group-buy groups failed at their deadline.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 15, 30, 60, 300},
		}),
		OverdueOrders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderly_overdue_orders_total", Help: "Open orders the deep check found overdue beyond its tolerance.",
		}),
		CloserPasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_closer_passes_total", Help: "Claim-and-close passes, by trigger.",
		}, []string{"trigger"}),
		PaymentInspections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_payment_inspections_total", Help: "Inspections of in-flight payments at close time, by outcome.",
		}, []string{"outcome"}),
		Callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_payment_callbacks_total", Help: "Payment callbacks handled, by status and result.",
		}, []string{"status", "result"}),
		CallbackRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_payment_callback_refusals_total", Help: "Signed payment callbacks refused, by reason.",
		}, []string{"reason"}),
		ChannelNotifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_channel_notifications_total", Help: "Verified payment channel notifications, by channel, kind and result.",
		}, []string{"channel", "kind", "result"}),
		ChannelVersionMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_channel_event_version_mismatches_total", Help: "Verified payment channel notifications of another API version than the channel pins, by channel and version.",
		}, []string{"channel", "version"}),
		ChannelPayments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_channel_payments_total", Help: "Payment attempts' outcomes by channel and variant (captured, failed).",
		}, []string{"channel", "variant", "outcome"}),
		ChannelOutOfRotation: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_channel_out_of_rotation_total", Help: "Channel variants taken out of rotation for a success rate below the floor, by channel and variant.",
		}, []string{"channel", "variant"}),
		ClosesDeferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_close_deferred_total", Help: "Closes of orders past their inspection hold deferred because their payment channel was unavailable, by channel.",
		}, []string{"channel"}),
		ChannelBreakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "orderly_channel_breaker_state", Help: "Circuit breaker of each payment channel: 0 closed, 1 half-open, 2 open.",
		}, []string{"channel"}),
		ClockOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orderly_clock_offset_seconds", Help: "Database clock minus this instance's clock, in seconds.",
		}),
		OutboxDelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_outbox_delivered_total", Help: "Outbox messages delivered, by topic.",
		}, []string{"topic"}),
		OutboxRetried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_outbox_retried_total", Help: "Failed outbox delivery attempts scheduled for retry, by topic.",
		}, []string{"topic"}),
		OutboxDead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_outbox_dead_total", Help: "Outbox messages moved to dead, by topic.",
		}, []string{"topic"}),
		DependencyUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "orderly_dependency_up", Help: "1 while an optional dependency answers, 0 while it does not, by dependency.",
		}, []string{"dependency"}),
		SagaAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_saga_attempts_total", Help: "Attempts of saga steps, by phase and outcome.",
		}, []string{"phase", "outcome"}),
		SagasEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_sagas_ended_total", Help: "Sagas ended, by final state.",
		}, []string{"state"}),
		SagasStuck: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orderly_sagas_stuck_total", Help: "Sagas moved to stuck after a compensation's last attempt failed.",
		}),
		OrderTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_order_transitions_total", Help: "Order transitions applied, by flow, from and to state.",
		}, []string{"flow", "from", "to"}),
		OutboxPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orderly_outbox_pending", Help: "Pending outbox messages, as last measured.",
		}),
		OutboxDeadNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orderly_outbox_dead", Help: "Dead outbox messages, as last measured.",
		}),
		OutboxOldestPendingAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orderly_outbox_oldest_pending_age_seconds", Help: "Age of the oldest pending outbox message, 0 when none.",
		}),
		GatewayLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "orderly_gateway_call_seconds", Help: "Payment gateway calls, by operation and outcome.", Buckets: latencyBuckets,
		}, []string{"op", "outcome"}),
		GatewayErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_gateway_errors_total", Help: "Failed payment gateway calls, by operation.",
		}, []string{"op"}),
		JobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "orderly_job_run_seconds", Help: "Periodic job runs, by job and outcome.", Buckets: latencyBuckets,
		}, []string{"job", "outcome"}),
		JobChanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_job_changed_total", Help: "Rows changed or findings of periodic job runs, by job.",
		}, []string{"job"}),
		WebhookDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_webhook_deliveries_total", Help: "Merchant webhook delivery attempts, by outcome.",
		}, []string{"outcome"}),
		RefundReversals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_refund_reversals_total", Help: "Refunds a provider failed after confirming them, by channel and outcome.",
		}, []string{"channel", "outcome"}),
		CreateQueueWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orderly_create_queue_waiting", Help: "Creates waiting in this instance for their SKU's batch transaction.",
		}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderly_http_requests_total", Help: "HTTP API answers, by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		HTTPRequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "orderly_http_request_duration_seconds", Help: "HTTP API requests, by method and route pattern.", Buckets: latencyBuckets,
		}, []string{"method", "route"}),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.OrdersCreated, m.OrdersClosed, m.CloseLateness, m.GroupLateness, m.OverdueOrders, m.CloserPasses,
		m.PaymentInspections, m.Callbacks, m.CallbackRefusals, m.ChannelNotifications, m.ChannelVersionMismatches, m.ChannelPayments, m.ChannelOutOfRotation, m.ClosesDeferred, m.ChannelBreakerState, m.ClockOffset, m.OutboxDelivered, m.OutboxRetried, m.OutboxDead,
		m.DependencyUp, m.SagaAttempts, m.SagasEnded, m.SagasStuck,
		m.OrderTransitions, m.OutboxPending, m.OutboxDeadNow, m.OutboxOldestPendingAge,
		m.GatewayLatency, m.GatewayErrors, m.JobDuration, m.JobChanged, m.WebhookDeliveries,
		m.RefundReversals, m.CreateQueueWaiting, m.HTTPRequests, m.HTTPRequestDuration,
	)
	return m
}

// OrDefault returns m, or a fresh set when m is nil.
func OrDefault(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics()
	}
	return m
}
