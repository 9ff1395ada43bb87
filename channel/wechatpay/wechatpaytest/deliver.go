package wechatpaytest

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// RetrySchedule is the pause before each new delivery of a notification that was not
// acknowledged (WeChat Pay: 15s/15s/30s/3m/10m/20m/30m/30m/30m/60m/3h/3h/3h/6h/6h, about
// 24 hours in all); after the last one the imitation gives up.
var RetrySchedule = []time.Duration{15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * time.Minute,
	10 * time.Minute, 20 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute, time.Hour,
	3 * time.Hour, 3 * time.Hour, 3 * time.Hour, 6 * time.Hour, 6 * time.Hour}

// Delivery is the record of one notification the imitation sent itself (Notify).
type Delivery struct {
	EventType   string // TRANSACTION.SUCCESS, REFUND.SUCCESS, …
	OutTradeNo  string
	OutRefundNo string // refunds only
	URL         string
	Attempts    int
	Status      int  // the HTTP status of the last attempt; 0 when it got no answer
	Acked       bool // answered 2xx: WeChat Pay stops
}

// notifier sends notifications in the background when on.
type notifier struct {
	mu         sync.Mutex
	on         bool
	client     *http.Client
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	deliveries []*Delivery
}

func (n *notifier) init() {
	n.ctx, n.cancel = context.WithCancel(context.Background())
}

func (n *notifier) stop() {
	n.cancel()
	n.wg.Wait()
}

// Notify makes the imitation send its notifications itself, as WeChat Pay does, with
// client (nil: a client with a 5 s timeout): a payment's TRANSACTION.SUCCESS when it is
// paid (Pay, PayLate, Webhook, the client step at PayPath) to the order's notify_url, and
// a refund's REFUND.SUCCESS, REFUND.CLOSED or REFUND.ABNORMAL when it reaches that status
// to the refund's notify_url. Each is posted with fresh Wechatpay-* headers per attempt
// (same id and body), in the background, until answered 2xx, retried on RetrySchedule,
// and abandoned when the server closes. Off (the default), the imitation sends nothing:
// tests mint notifications with TransactionNotification and RefundNotification.
func (s *Server) Notify(client *http.Client) {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	s.notifier.mu.Lock()
	s.on, s.client = true, client
	s.notifier.mu.Unlock()
}

// NotifyOff stops sending notifications (those under way go on), as when the merchant's
// notify URL cannot be reached: the merchant learns the outcome by query only.
func (s *Server) NotifyOff() {
	s.notifier.mu.Lock()
	s.on = false
	s.notifier.mu.Unlock()
}

// Deliveries returns copies of the records of the notifications sent so far (Notify).
func (s *Server) Deliveries() []Delivery {
	s.notifier.mu.Lock()
	defer s.notifier.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	for i, d := range s.deliveries {
		out[i] = *d
	}
	return out
}

func (s *Server) notifying() bool {
	s.notifier.mu.Lock()
	defer s.notifier.mu.Unlock()
	return s.on
}

// sendLater mints the notification of resource and delivers it to url in the background.
// It may be called with s.mu held: minting waits for the goroutine.
func (s *Server) sendLater(url, eventType, associatedData string, resource any, outTradeNo, outRefundNo string) {
	n := &s.notifier
	d := &Delivery{EventType: eventType, OutTradeNo: outTradeNo, OutRefundNo: outRefundNo, URL: url}
	n.mu.Lock()
	n.deliveries = append(n.deliveries, d)
	client := n.client
	n.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_, body := s.Notification(eventType, associatedData, resource, NotifyOptions{})
		for attempt := 0; ; attempt++ {
			status, _, _ := Deliver(n.ctx, client, url, s.Sign(body, s.Now()), body)
			n.mu.Lock()
			d.Attempts, d.Status, d.Acked = attempt+1, status, status >= 200 && status <= 299
			acked := d.Acked
			n.mu.Unlock()
			if acked || attempt >= len(RetrySchedule) {
				return
			}
			t := time.NewTimer(RetrySchedule[attempt])
			select {
			case <-n.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}
