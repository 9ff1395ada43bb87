package wechatpaytest

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// WebhookPath is where orderly takes WeChat Pay's notifications.
const WebhookPath = "/v1/channels/wechat/webhook"

// ErrNotNotified is returned by Webhook for an outcome WeChat Pay does not notify: a
// payment that failed or expired (only successes are notified; the merchant learns the
// rest by query or closes the order).
var ErrNotNotified = errors.New("wechatpaytest: WeChat Pay sends no notification for this outcome")

type webhook struct {
	header http.Header
	body   []byte
}

// Webhook plays an outcome of a payment at the imitation and returns the notification
// that reports it, as `orderly simulate` asks a provider (the simulate.Provider method):
// status orderly.CallbackSucceeded pays the order (PayLate if the server closed it: money
// that arrives late, which the server must refund) and returns its TRANSACTION.SUCCESS;
// the same payment and status give the same notification again (same id, bytes and
// signature, as WeChat Pay's retries within the 5-minute window). CallbackFailed and
// CallbackExpired mark an unpaid order PAYERROR and return ErrNotNotified: WeChat Pay
// notifies only successes.
func (s *Server) Webhook(paymentID, status string) (path string, body []byte, header http.Header, err error) {
	key := paymentID + "/" + status
	s.webhookMu.Lock() // one outcome is played once, also when asked in parallel
	defer s.webhookMu.Unlock()
	s.mu.Lock()
	if s.webhooks == nil {
		s.webhooks = map[string]webhook{}
	}
	w, ok := s.webhooks[key]
	s.mu.Unlock()
	if ok {
		return WebhookPath, w.body, w.header.Clone(), nil
	}
	switch status {
	case orderly.CallbackSucceeded:
		if _, err := s.Pay(paymentID, 0); err != nil {
			if _, err := s.PayLate(paymentID, 0); err != nil {
				return "", nil, nil, err
			}
		}
	case orderly.CallbackFailed, orderly.CallbackExpired:
		s.mu.Lock()
		if o, ok := s.orders[channel.OutTradeNo(paymentID)]; ok && o.State == "NOTPAY" {
			o.State = "PAYERROR"
		}
		s.mu.Unlock()
		return "", nil, nil, ErrNotNotified
	default:
		return "", nil, nil, fmt.Errorf("wechatpaytest: status %q", status)
	}
	h, b, err := s.TransactionNotification(paymentID, NotifyOptions{})
	if err != nil {
		return "", nil, nil, err
	}
	s.mu.Lock()
	s.webhooks[key] = webhook{header: h, body: b}
	s.mu.Unlock()
	return WebhookPath, b, h.Clone(), nil
}
