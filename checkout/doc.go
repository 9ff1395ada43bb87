// Package checkout is the wallet checkout (docs/flows/wallet-checkout.md): an order of the
// standard flow paid at once from the buyer's wallet balance, as the saga "wallet_checkout"
// of the engine's orchestrator (package saga), with its instance and step log persisted:
//
//	step     action                                      compensation
//	order    write the order, pending_payment            close it (close_reason: why the saga failed)
//	stock    reserve its items' stock                    release the reservations
//	coupon   freeze its coupon (none: nothing)           release the coupon
//	pay      record the payment, order → paid, and       credit the debit back (a wallet refund),
//	         debit the wallet by the order's amount      if there is one
//
// The order's id is the saga's id, so GET /v1/sagas/{order id} shows its log. Every step is
// a saga.LocalTx participant on the engine's store: its writes commit exactly when its
// outcome is recorded (fenced by the instance's version), so a step applies at most once
// whatever retries, leases and crashes happen, and an action can never land after its
// compensation. When every step answers at once the four run in one transaction. The
// wallet debit and the paid transition are one step, so money is never taken from a
// wallet without its order being paid in the same commit; alone, the debit is written
// last, so the platform account's row, which every checkout updates, is held only until
// the commit.
//
// The wallet transfers carry the operation's idempotency key
// (<saga id>/pay/action, <saga id>/pay/compensation), unique in the ledger. The order's state changes only
// through order.Machine: the pay transition (reservations committed, coupon used,
// order.paid published) and the cancel transition with the failure's close reason
// (reservations and coupon released, order.closed published).
//
// Outcomes. An empty wallet, short stock, an unavailable coupon, or an order no longer
// payable (closed by its deadline or by the buyer while a step waited for a retry) is a
// business failure: not retried; the steps done compensate at once, in reverse. Anything
// else (a database error, an injected fault) is transient: retried with backoff until the
// step's deadline, then compensated too.
package checkout
