package simulate

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
)

// behaviour is what a buyer does with its order.
type behaviour int

const (
	payOnTime     behaviour = iota // start a payment, the success callback comes soon
	payJustBefore                  // the success callback comes 100–300 ms before expires_at
	payLate                        // the success callback comes after the order closed
	payDuplicate                   // the success callback 5× in parallel, then once more 1 s later
	payFailRetry                   // the first attempt fails, a second one succeeds
	cancelOrder                    // the buyer cancels
	neverPay                       // the buyer walks away
	numBehaviours
)

var behaviourNames = [numBehaviours]string{"pay_on_time", "pay_just_before", "pay_late", "duplicate_callbacks",
	"fail_then_retry", "cancel", "never_pay"}

func (b behaviour) String() string { return behaviourNames[b] }

// behaviourWeights is the mix of buyers, in percent.
var behaviourWeights = [numBehaviours]int{30, 10, 10, 10, 10, 10, 20}

// paysInTime reports whether the buyer's success callback is meant to arrive before the
// deadline, so the order should end paid.
func (b behaviour) paysInTime() bool {
	return b == payOnTime || b == payJustBefore || b == payDuplicate || b == payFailRetry
}

// Shape of the seeded catalogue and of the orders.
const (
	numSKUs          = 20
	numScarceSKUs    = 4    // the last SKUs; stock is a third of what the orders ask
	scarceShare      = 0.10 // share of orders that include one scarce SKU
	ordersPerUser    = 5    // users = orders / ordersPerUser
	couponEveryNUser = 4    // every 4th user holds one coupon
	couponShare      = 0.5  // share of a coupon holder's orders that use it
	couponAmountOff  = 100  // minor units; every order costs more
	currency         = "USD"
	duplicateCount   = 5               // success callbacks sent in parallel
	duplicateLater   = 1 * time.Second // then one more, this much later
	lateOccurredBy   = 2 * time.Hour   // a late payment's occurred_at, after the deadline
)

// plannedOrder is one order of the plan: who buys what and how the buyer behaves. Delays
// are drawn with the plan, so the seed fixes them too.
type plannedOrder struct {
	index     int
	behaviour behaviour
	user      string
	items     []orderly.Item
	useCoupon bool
	// startDelay is the wait after creation before the first payment or the cancel.
	startDelay time.Duration
	// callbackDelay is the wait after a payment started before its callback.
	callbackDelay time.Duration
	// beforeDeadline is how long before expires_at a just-before payer's callback is sent.
	beforeDeadline time.Duration
	// refunds are the merchant's partial refunds once the order is paid (see refund.go).
	refunds []plannedRefund
}

// skuPlan is one SKU of the catalogue.
type skuPlan struct {
	sku    string
	price  int64 // minor units per unit
	scarce bool
	demand int64 // units the plan's orders ask for
	stock  int64 // units seeded
}

// plan is everything a run will do, drawn from one seeded rand.
type plan struct {
	skus   []*skuPlan
	users  []string
	orders []*plannedOrder
}

// couponHolder reports whether user number i is given a coupon.
func couponHolder(i int) bool { return i%couponEveryNUser == 0 }

// newPlan draws a run's plan. prefix makes the names unique to the run; timeout is the
// payment timeout the orders get, which scales the buyers' delays.
func newPlan(seed int64, prefix string, orders int, timeout time.Duration) *plan {
	// A seeded, reproducible traffic plan, not a secret: math/rand is the right tool.
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6f72_6465_726c_7921)) //nolint:gosec // "orderly!" as the stream

	p := &plan{}
	for i := range numSKUs {
		p.skus = append(p.skus, &skuPlan{
			sku:    fmt.Sprintf("%s-sku-%02d", prefix, i+1),
			price:  500 + 100*rng.Int64N(46), // 5.00 – 50.00
			scarce: i >= numSKUs-numScarceSKUs,
		})
	}
	normal, scarce := p.skus[:numSKUs-numScarceSKUs], p.skus[numSKUs-numScarceSKUs:]
	for i := range max(1, orders/ordersPerUser) {
		p.users = append(p.users, fmt.Sprintf("%s-user-%04d", prefix, i+1))
	}
	frac := func(lo, hi float64) time.Duration {
		return time.Duration((lo + (hi-lo)*rng.Float64()) * float64(timeout))
	}
	for i := range orders {
		po := &plannedOrder{index: i, behaviour: drawBehaviour(rng)}
		u := rng.IntN(len(p.users))
		po.user = p.users[u]
		po.useCoupon = couponHolder(u) && rng.Float64() < couponShare
		for _, k := range rng.Perm(len(normal))[:1+rng.IntN(3)] {
			po.items = append(po.items, orderly.Item{SKU: normal[k].sku, Quantity: 1 + rng.Int64N(3), UnitPrice: normal[k].price})
		}
		if rng.Float64() < scarceShare {
			s := scarce[rng.IntN(len(scarce))]
			po.items = append(po.items, orderly.Item{SKU: s.sku, Quantity: 1 + rng.Int64N(2), UnitPrice: s.price})
		}
		po.startDelay = frac(0.02, 0.10)
		po.callbackDelay = frac(0.05, 0.20)
		po.beforeDeadline = time.Duration(100+rng.IntN(201)) * time.Millisecond
		p.orders = append(p.orders, po)
	}
	demand := map[string]int64{}
	for _, po := range p.orders {
		for _, it := range po.items {
			demand[it.SKU] += it.Quantity
		}
	}
	planRefunds(seed, p, timeout)
	for _, s := range p.skus {
		s.demand = demand[s.sku]
		if s.scarce {
			s.stock = s.demand/3 + 1
		} else {
			s.stock = s.demand + 10
		}
	}
	return p
}

// asksScarce reports whether the order asks for a scarce SKU: only such an order may be
// refused out-of-stock, since every other SKU is stocked above the run's whole demand.
func (p *plan) asksScarce(po *plannedOrder) bool {
	for _, it := range po.items {
		for _, s := range p.skus {
			if s.sku == it.SKU && s.scarce {
				return true
			}
		}
	}
	return false
}

// price returns what the order must cost: Σ quantity × unit_price of its items, minus the
// coupon's amount_off when it uses one (docs/api.md; order/service.go prices so).
func (po *plannedOrder) price(withCoupon bool) int64 {
	var total int64
	for _, it := range po.items {
		total += it.Quantity * it.UnitPrice
	}
	if withCoupon {
		total -= couponAmountOff
	}
	return total
}

// itemList formats items as "sku×quantity@price, …".
func itemList(items []orderly.Item) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = fmt.Sprintf("%s×%d@%d", it.SKU, it.Quantity, it.UnitPrice)
	}
	return strings.Join(parts, ", ")
}

func drawBehaviour(rng *rand.Rand) behaviour { return drawWeighted(rng, behaviourWeights[:], neverPay) }

// drawWeighted draws an index of weights (percentages summing to at most 100) as a T;
// fallback when the draw lands past their sum.
func drawWeighted[T ~int](rng *rand.Rand, weights []int, fallback T) T {
	n := rng.IntN(100)
	for i, w := range weights {
		if n < w {
			return T(i)
		}
		n -= w
	}
	return fallback
}
