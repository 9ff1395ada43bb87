// Package simulate is orderly's demo and acceptance test: it drives real HTTP traffic
// against a running server (docs/api.md) and checks at the end that every invariant of
// docs/getting-started.md held.
//
// A run has four phases:
//
//  1. Seed: about twenty SKUs through PUT /v1/inventory/{sku} (a few of them scarce, with
//     less stock than the run will ask for) and one coupon for every fourth user through
//     POST /v1/coupons. Names carry a per-run prefix, so runs against one database do not
//     meet.
//  2. Send: Config.Orders orders at Config.Rate orders/s. Order i is sent at start + i/rate
//     (no ticker and no sleep-in-a-loop, so the pace does not drift) and is given a buyer
//     behaviour drawn from a rand seeded with Config.Seed: pay on time, pay just before the
//     deadline, pay late (after the order closed), pay with duplicate callbacks (5 in
//     parallel and one a second later), fail then pay on a second attempt, cancel, or never
//     pay. Some orders use their buyer's coupon. Every buyer plays the gateway too: it signs
//     its callbacks with Config.CallbackSecret (payment.Sign). About a third of the orders
//     whose buyer pays then get one or two partial refunds from the merchant (10–40 % of
//     the amount each, half of them returning one unit to stock), each with its own
//     Idempotency-Key.
//  3. Settle: wait until every deadline passed and every order settled (closed or paid, its
//     refunds done, stock released, coupons released or used), bounded by Config.Drain
//     after the last close_at.
//  4. Check: each order's final state against its buyer's behaviour — a success
//     acknowledged before close_at by more than the measured clock margin (ClockOffset:
//     the database clock with a Store, else the Date header) must end paid, whatever its
//     closeness to the deadline; I1 (no early close) and lateness percentiles from
//     closed_at − close_at, with Config.MaxLateness as a bound; I2 (paid is never lost:
//     late payments refunded and present, duplicates applied once); I3 (coupons of closed
//     orders available again, of paid orders used by them; with Config.GatewayLedger, one
//     refund at the gateway per refunded payment, for its amount); I4 (every order and
//     payment is for Σ quantity × unit_price − the coupon's amount_off; per SKU seeded =
//     available + held + sold, held = 0 at rest, sold = what the paid orders bought less
//     what refunds restocked; per order captured − refunded = what the final state says,
//     every acknowledged partial refund succeeded once for its amount and, with
//     Config.GatewayLedger, landed at the gateway once under its refund id); I5
//     (no order left open); refusals (out-of-stock only for orders asking for a scarce
//     SKU, coupon-unavailable only for orders using a coupon, Config.MinCreatedShare); payments
//     tested (Config.MinPaidShare of the buyers who meant to pay in time ended paid); and,
//     when Config.Store is set, verify.Check on the database (all of I1–I7).
//
// The traffic goes to Config.Targets, one server or several instances sharing one
// database, round robin per request. A request that gets no answer (the instance was
// killed, or restarts) is sent again to the next target (Config.RetryFor): order creations
// carry an Idempotency-Key and callbacks are idempotent, so that is safe; a cancel whose
// retry finds the order closed by the buyer counts as done; a payment start sent again may
// have started an attempt its buyer never learns of, which the checks allow (one per such
// start) but never as the applied one. A 409 conflict is sent again a few times, as the
// server asks.
//
// Run returns a Result whose JSON shape is stable (the CLI prints it); Result.Summary is
// the human version.
package simulate
