// Package payment starts payment attempts through a Gateway, verifies and applies signed
// callbacks at most once, inspects in-flight payments when their order is due to close or
// the buyer cancels it, and refunds payments that arrive for orders that no longer take
// them and second captures of an attempt (docs/concepts/payments.md). Every refused callback is
// counted, logged and kept (callback_refusals). It also
// makes the gateway side of merchant refunds (RefundExecuteHandler): one gateway refund per
// refund, keyed by the refund id, confirmed or refused into the refund's state.
package payment
