package engine_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// TestOrderCountersOverHTTP: every create and every close counts once in
// orderly_orders_created_total{flow} and orderly_orders_closed_total{flow,reason,trigger},
// whatever path made it: API creates, a wallet checkout compensated for want of funds, trips,
// a buyer's cancel, a rider's cancel and the sweep's closes; on every dialect. The old code
// counted creates only through the order service's callback (no trips, no checkouts) and
// closes only in the closer (no cancels, no saga closes).
func TestOrderCountersOverHTTP(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := enginetest.New(t, enginetest.Options{Dialect: dialect})
			e.SetStock(t, "sku-1", 10)
			do := func(path, body string, want int) map[string]any {
				t.Helper()
				req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				e.Engine.Handler().ServeHTTP(rec, req)
				var out map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != want {
					t.Fatalf("POST %s: %d %s, want %d", path, rec.Code, rec.Body, want)
				}
				return out
			}
			order := `{"user_id":"buyer-1","currency":"USD","items":[{"sku":"sku-1","quantity":1,"unit_price":500}]}`
			var ids []string
			for range 3 {
				ids = append(ids, do("/v1/orders", order, http.StatusCreated)["id"].(string))
			}
			do("/v1/orders/"+ids[0]+"/cancel", "", http.StatusOK)
			// No wallet: the checkout's saga fails on the debit and closes its order.
			do("/v1/orders", `{"user_id":"buyer-2","currency":"USD","payment_method":"wallet","items":[{"sku":"sku-1","quantity":1,"unit_price":500}]}`,
				http.StatusConflict)
			var trips []string
			for range 2 {
				trips = append(trips, do("/v1/trips", `{"rider_id":"rider-1","currency":"USD","estimate":4000}`, http.StatusCreated)["id"].(string))
			}
			do("/v1/trips/"+trips[0]+"/cancel", "", http.StatusOK)
			// Past every deadline: the sweep closes the two open orders and the open trip.
			e.Clock.Advance(8 * 24 * time.Hour)
			for {
				res, err := e.Closer.CloseDue(t.Context(), closer.TriggerSweep)
				if err != nil {
					t.Fatal(err)
				}
				if res.Closed == 0 {
					break
				}
			}

			got := counters(t, e.Metrics.Registry)
			want := map[string]float64{
				`orderly_orders_created_total{flow=standard}`:                                           4,
				`orderly_orders_created_total{flow=ride_hailing}`:                                       2,
				`orderly_orders_closed_total{flow=standard,reason=buyer_cancelled,trigger=buyer}`:       1,
				`orderly_orders_closed_total{flow=standard,reason=insufficient_funds,trigger=checkout}`: 1,
				`orderly_orders_closed_total{flow=standard,reason=payment_timeout,trigger=sweep}`:       2,
				`orderly_orders_closed_total{flow=ride_hailing,reason=rider_cancelled,trigger=rider}`:   1,
				`orderly_orders_closed_total{flow=ride_hailing,reason=hold_expired,trigger=sweep}`:      1,
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			for k, v := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("unexpected %s = %v", k, v)
				}
			}
		})
	}
}

// counters gathers the series of orderly_orders_created_total and
// orderly_orders_closed_total from reg, keyed name{label=value,…} (labels in name order).
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "orderly_orders_created_total" && f.GetName() != "orderly_orders_closed_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[f.GetName()+"{"+labels(m)+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(parts, ",")
}
