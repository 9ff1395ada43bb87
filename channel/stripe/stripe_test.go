package stripe

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

const testSecret = "whsec_test_secret" // the secret of stripe-go's webhook tests

// vectorBody was signed at vectorTime with testSecret by openssl, independently of this
// package: printf '%s' "1700000000.$body" | openssl dgst -sha256 -hmac whsec_test_secret
const (
	vectorBody = `{"id":"evt_vector","object":"event","type":"payment_intent.succeeded","created":1700000000,"data":{"object":` +
		`{"id":"pi_1","object":"payment_intent","amount":80,"amount_received":80,"currency":"jpy","status":"succeeded","metadata":{"payment_id":"pay_1"}}}}`
	vectorSig = "c49ed725718ab270e84161fb92bcdbdd7854e87ada764321527139331cb9e249"
)

var vectorTime = time.Unix(1700000000, 0)

func TestSignVector(t *testing.T) {
	t.Parallel()
	if got, want := Sign(testSecret, vectorTime, []byte(vectorBody)), "t=1700000000,v1="+vectorSig; got != want {
		t.Errorf("Sign = %q, want %q (openssl)", got, want)
	}
}

func header(v string) http.Header {
	h := http.Header{}
	if v != "" {
		h.Set(SignatureHeader, v)
	}
	return h
}

// TestVerify: the signature is checked over the raw bytes, within 5 minutes, against every
// v1 and every configured secret; anything else is EUNAUTHORIZED and decodes nothing.
func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(vectorBody)
	// The same event re-encoded by a client: other field order and whitespace.
	reencoded := []byte(`{ "type": "payment_intent.succeeded", "id": "evt_vector", "created": 1700000000,
  "data": { "object": { "metadata": {"payment_id": "pay_1"}, "status": "succeeded", "currency": "jpy",
  "amount_received": 80, "amount": 80, "object": "payment_intent", "id": "pi_1" } } }`)
	tampered := []byte(strings.Replace(vectorBody, `"amount_received":80`, `"amount_received":90`, 1))
	oneByte := append([]byte(nil), body...)
	oneByte[len(oneByte)-3] ^= 0x01
	good := "t=1700000000,v1=" + vectorSig
	old := Sign(testSecret, vectorTime.Add(-6*time.Minute), body)
	cases := []struct {
		name    string
		secrets []string
		header  string
		body    []byte
		now     time.Time
		ok      bool
	}{
		{"valid", []string{testSecret}, good, body, vectorTime, true},
		{"valid at the edge of the tolerance", []string{testSecret}, good, body, vectorTime.Add(5 * time.Minute), true},
		{"re-encoded body signed over its own raw bytes", []string{testSecret}, Sign(testSecret, vectorTime, reencoded), reencoded, vectorTime, true},
		{"secret roll: signed with the new secret", []string{"whsec_old", testSecret}, good, body, vectorTime, true},
		{"several v1, the second matches", []string{testSecret}, "t=1700000000,v1=" + strings.Repeat("ab", 32) + ",v1=" + vectorSig + ",v0=00", body, vectorTime, true},
		{"re-encoded body under the original signature", []string{testSecret}, good, reencoded, vectorTime, false},
		{"one byte changed", []string{testSecret}, good, oneByte, vectorTime, false},
		{"amount changed", []string{testSecret}, good, tampered, vectorTime, false},
		{"old timestamp (6 min)", []string{testSecret}, old, body, vectorTime, false},
		{"timestamp 6 min ahead", []string{testSecret}, good, body, vectorTime.Add(-6 * time.Minute), false},
		{"another secret", []string{"whsec_other"}, good, body, vectorTime, false},
		{"no secret configured", nil, good, body, vectorTime, false},
		{"missing header", []string{testSecret}, "", body, vectorTime, false},
		{"v0 only", []string{testSecret}, "t=1700000000,v0=" + vectorSig, body, vectorTime, false},
		{"no timestamp", []string{testSecret}, "v1=" + vectorSig, body, vectorTime, false},
		{"signature of the timestamp changed", []string{testSecret}, "t=1700000001,v1=" + vectorSig, body, vectorTime, false},
	}
	for _, tc := range cases {
		a := New(Config{WebhookSecrets: tc.secrets})
		n, err := a.Verify(header(tc.header), tc.body, tc.now)
		if tc.ok {
			if err != nil || n == nil || n.EventID != "evt_vector" || n.PaymentID != "pay_1" || n.Amount != 80 || n.Currency != "JPY" {
				t.Errorf("%s: Verify = %+v, %v; want evt_vector, pay_1, 80 JPY", tc.name, n, err)
			}
			continue
		}
		if n != nil || orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
			t.Errorf("%s: Verify = %+v, %v; want nothing and %s", tc.name, n, err, orderly.EUNAUTHORIZED)
		}
	}
}

// TestAmounts: Stripe amounts to orderly minor units and back, exactly.
func TestAmounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stripe   int64
		currency string
		minor    int64
		cur      string
	}{
		{80, "jpy", 80, "JPY"},       // zero-decimal: ¥80 is 80
		{1000, "usd", 1000, "USD"},   // $10.00 is 1000 cents
		{1, "usd", 1, "USD"},         // $0.01
		{10000, "isk", 100, "ISK"},   // Stripe keeps ISK two-decimal: 100 kr
		{500, "mga", 50000, "MGA"},   // Stripe takes whole ariary; ISO has 2 decimals
		{5120, "kwd", 5120, "KWD"},   // three-decimal
		{15000, "krw", 15000, "KRW"}, // zero-decimal
	} {
		got, cur, err := ToMinor(tc.stripe, tc.currency)
		if err != nil || got != tc.minor || cur != tc.cur {
			t.Errorf("ToMinor(%d, %s) = %d %s, %v; want %d %s", tc.stripe, tc.currency, got, cur, err, tc.minor, tc.cur)
		}
		back, lower, err := FromMinor(tc.minor, tc.cur)
		if err != nil || back != tc.stripe || lower != tc.currency {
			t.Errorf("FromMinor(%d, %s) = %d %s, %v; want %d %s", tc.minor, tc.cur, back, lower, err, tc.stripe, tc.currency)
		}
	}
	for _, tc := range []struct {
		amount   int64
		currency string
	}{{150, "isk"}, {-1, "usd"}, {100, "xxx"}} {
		if got, _, err := ToMinor(tc.amount, tc.currency); err == nil {
			t.Errorf("ToMinor(%d, %s) = %d, want an error", tc.amount, tc.currency, got)
		}
	}
	if got, _, err := FromMinor(50001, "MGA"); err == nil {
		t.Errorf("FromMinor(50001, MGA) = %d, want an error (Stripe takes whole ariary)", got)
	}
}

// TestDecode: each event type orderly acts on, to its notification.
func TestDecode(t *testing.T) {
	t.Parallel()
	ev := func(typ, obj string) string {
		return `{"id":"evt_1","type":"` + typ + `","created":1700000000,"data":{"object":` + obj + `}}`
	}
	pi := func(status string) string {
		return `{"id":"pi_1","object":"payment_intent","amount":1000,"amount_received":1000,"currency":"usd","status":"` + status + `","metadata":{"payment_id":"pay_1"}}`
	}
	session := func(payStatus string) string {
		return `{"id":"cs_1","object":"checkout.session","amount_total":80,"currency":"jpy","payment_intent":"pi_2","client_reference_id":"pay_2","payment_status":"` + payStatus + `","metadata":{}}`
	}
	refund := func(status string) string {
		return `{"id":"re_1","object":"refund","amount":300,"currency":"usd","status":"` + status + `","payment_intent":"pi_1","metadata":{"refund_id":"rf_1","payment_id":"pay_1"}}`
	}
	cases := []struct {
		name    string
		body    string
		kind    channel.Kind
		payment string
		txn     string
		amount  int64
		refund  string
	}{
		{"payment intent succeeded", ev("payment_intent.succeeded", pi("succeeded")), channel.PaymentSucceeded, "pay_1", "pi_1", 1000, ""},
		{"payment intent failed", ev("payment_intent.payment_failed", pi("requires_payment_method")), channel.PaymentFailed, "pay_1", "pi_1", 1000, ""},
		{"payment intent canceled", ev("payment_intent.canceled", pi("canceled")), channel.PaymentFailed, "pay_1", "pi_1", 1000, ""},
		{"checkout completed, paid", ev("checkout.session.completed", session("paid")), channel.PaymentSucceeded, "pay_2", "pi_2", 80, ""},
		{"checkout completed, payment pending", ev("checkout.session.completed", session("unpaid")), channel.PaymentPending, "pay_2", "pi_2", 80, ""},
		{"checkout async succeeded", ev("checkout.session.async_payment_succeeded", session("paid")), channel.PaymentSucceeded, "pay_2", "pi_2", 80, ""},
		{"checkout async failed", ev("checkout.session.async_payment_failed", session("unpaid")), channel.PaymentFailed, "pay_2", "pi_2", 80, ""},
		{"checkout expired", ev("checkout.session.expired", session("unpaid")), channel.PaymentFailed, "pay_2", "pi_2", 80, ""},
		{"refund succeeded", ev("refund.updated", `{"id":"re_1","object":"refund","amount":300,"currency":"usd","status":"succeeded","payment_intent":"pi_1","metadata":{"refund_id":"rf_1","payment_id":"pay_1"}}`),
			channel.RefundSucceeded, "pay_1", "pi_1", 300, "rf_1"},
		{"refund failed", ev("refund.updated", `{"id":"re_1","object":"refund","amount":300,"currency":"usd","status":"failed","payment_intent":"pi_1","metadata":{"refund_id":"rf_1","payment_id":"pay_1"}}`),
			channel.RefundFailed, "pay_1", "pi_1", 300, "rf_1"},
		{"charge refunded, partial", ev("charge.refunded", `{"id":"ch_1","object":"charge","amount":1000,"amount_refunded":400,"currency":"usd","payment_intent":"pi_1","metadata":{"payment_id":"pay_1"},`+
			`"refunds":{"data":[{"id":"re_2","amount":100,"status":"succeeded","metadata":{"refund_id":"rf_2"}},{"id":"re_1","amount":300,"status":"succeeded","metadata":{"refund_id":"rf_1"}}]}}`),
			channel.RefundSucceeded, "pay_1", "pi_1", 100, "rf_2"},
		{"refund pending", ev("refund.created", refund("pending")), channel.PaymentPending, "pay_1", "pi_1", 300, "rf_1"},
		{"refund requires_action", ev("refund.updated", refund("requires_action")), channel.PaymentPending, "pay_1", "pi_1", 300, "rf_1"},
		{"charge.refund.updated succeeded", ev("charge.refund.updated", refund("succeeded")), channel.RefundSucceeded, "pay_1", "pi_1", 300, "rf_1"},
		{"charge.refund.updated pending", ev("charge.refund.updated", refund("pending")), channel.PaymentPending, "pay_1", "pi_1", 300, "rf_1"},
		{"refund.failed", ev("refund.failed", refund("failed")), channel.RefundFailed, "pay_1", "pi_1", 300, "rf_1"},
		{"refund canceled", ev("refund.updated", refund("canceled")), channel.RefundFailed, "pay_1", "pi_1", 300, "rf_1"},
		{"charge refunded, no refunds list (2022-11-15 and later)", ev("charge.refunded", `{"id":"ch_1","object":"charge","amount":1000,"amount_refunded":400,"currency":"usd","payment_intent":"pi_1","metadata":{"payment_id":"pay_1"}}`),
			channel.Ignored, "", "pi_1", 0, ""},
		{"charge refunded, newest refund pending", ev("charge.refunded", `{"id":"ch_1","object":"charge","amount":1000,"amount_refunded":400,"currency":"usd","payment_intent":"pi_1","metadata":{"payment_id":"pay_1"},`+
			`"refunds":{"data":[{"id":"re_2","amount":100,"status":"pending","metadata":{"refund_id":"rf_2"}}]}}`),
			channel.PaymentPending, "pay_1", "pi_1", 100, "rf_2"},
		{"payment intent processing", ev("payment_intent.processing", pi("processing")), channel.PaymentPending, "pay_1", "pi_1", 1000, ""},
		{"payment intent requires_action", ev("payment_intent.requires_action", pi("requires_action")), channel.PaymentPending, "pay_1", "pi_1", 1000, ""},
		{"another system's payment", ev("payment_intent.succeeded", `{"id":"pi_9","object":"payment_intent","amount_received":5,"currency":"usd","metadata":{}}`), channel.Ignored, "", "pi_9", 0, ""},
		{"an event orderly does not act on", ev("customer.created", `{"id":"cus_1","object":"customer"}`), channel.Ignored, "", "", 0, ""},
	}
	for _, tc := range cases {
		n, _, err := decode("stripe", []byte(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if n.Kind != tc.kind || n.PaymentID != tc.payment || n.ChannelTxnID != tc.txn || n.Amount != tc.amount || n.RefundID != tc.refund ||
			n.EventID != "evt_1" || !n.OccurredAt.Equal(vectorTime) {
			t.Errorf("%s: got kind %s payment %q txn %q amount %d refund %q event %s at %s; want %s %q %q %d %q evt_1 at %s",
				tc.name, n.Kind, n.PaymentID, n.ChannelTxnID, n.Amount, n.RefundID, n.EventID, n.OccurredAt, tc.kind, tc.payment, tc.txn, tc.amount, tc.refund, vectorTime)
		}
	}
	for _, bad := range []string{`not json`, `{"type":"payment_intent.succeeded"}`,
		ev("payment_intent.succeeded", `{"id":"pi_1","amount_received":150,"currency":"isk","metadata":{"payment_id":"p"}}`)} {
		if _, _, err := decode("stripe", []byte(bad)); orderly.ErrorCode(err) != orderly.EINVALID {
			t.Errorf("decode(%s) = %v, want %s", bad, err, orderly.EINVALID)
		}
	}
}
