package alipaytest

import (
	"fmt"
	"net/http"

	"github.com/orderlyhq/orderly"
)

// WebhookPath is where orderly takes Alipay's notifications.
const WebhookPath = "/v1/channels/alipay/webhook"

// Webhook plays an outcome of a payment at the imitation and returns the notification
// that reports it, as `orderly simulate` asks a provider (the simulate.Provider method):
// status orderly.CallbackSucceeded pays the trade (PayLate if the server closed it: money
// that arrives late, which the server must refund); CallbackFailed and CallbackExpired
// close a trade nobody paid (CloseTrade). The same payment and status give the same
// notification again (same bytes, same notify_id), as Alipay's retries do. The
// notification is signed when minted; Alipay's carry no timestamp, so a later delivery
// verifies as well.
func (s *Server) Webhook(paymentID, status string) (path string, body []byte, header http.Header, err error) {
	key := paymentID + "/" + status
	s.webhookMu.Lock() // one outcome is played once, also when asked in parallel
	defer s.webhookMu.Unlock()
	s.mu.Lock()
	if s.webhooks == nil {
		s.webhooks = map[string][]byte{}
	}
	body, ok := s.webhooks[key]
	s.mu.Unlock()
	if !ok {
		switch status {
		case orderly.CallbackSucceeded:
			if _, err := s.Pay(paymentID, 0); err != nil {
				if _, err := s.PayLate(paymentID, 0); err != nil {
					return "", nil, nil, err
				}
			}
		case orderly.CallbackFailed, orderly.CallbackExpired:
			if _, err := s.CloseTrade(paymentID, 0); err != nil {
				return "", nil, nil, err
			}
		default:
			return "", nil, nil, fmt.Errorf("alipaytest: status %q", status)
		}
		if body, err = s.PaymentNotification(paymentID); err != nil {
			return "", nil, nil, err
		}
		s.mu.Lock()
		s.webhooks[key] = body
		s.mu.Unlock()
	}
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	return WebhookPath, body, h, nil
}
