// Package saga is orderly's saga orchestrator: work that spans several participants (an
// order, a wallet, coupons, a payment gateway) and cannot share one database transaction
// ends either completed or fully compensated, even when a process dies half way or a
// participant answers late, twice or never (docs/concepts/sagas.md, invariant I8).
//
// A Definition is a name and an ordered list of steps; each Step has an action, an optional
// compensation, a per-attempt timeout and a retry policy. An instance and its step log are
// persisted through store.SagaTx (tables saga_instances and saga_steps). An instance is
//
//	running      → succeeded                    every action succeeded, in order
//	running      → compensating → compensated   the compensations of the steps done (and of
//	                                             a step whose outcome is unknown), in reverse
//	compensating → stuck → compensating         a compensation failed MaxCompensationAttempts
//	                                             times; an admin re-drive resumes it
//
// and never moves from compensating back to running.
//
// Outcomes of one attempt (a participant's error decides): nil is success; an error wrapped
// by Business is a definitive business failure, never retried: compensation starts at once
// with the step before; any other error, or the attempt's Timeout, is transient: retried
// after capped exponential backoff with jitter (RetryPolicy) until the step's deadline
// (RetryPolicy.Deadline after its first attempt), after which the outcome is unknown and
// the step itself is compensated too. Compensations are retried until they succeed.
//
// Execution. Every attempt is claimed: the transaction that claims it bumps the
// instance's version (the fencing token), counts the attempt and sets wake_at to the end
// of its lease (Timeout + Config.LeaseMargin). A runner records the outcome only while its
// version is current, so two executions of a step never overlap through the orchestrator,
// and a runner that crashed leaves a step that becomes due again when its lease ends: the
// closer's one timer, sweep and deep check claim due instances (FOR UPDATE SKIP LOCKED)
// through Orchestrator.Timed, which implements closer.Timed, and the orchestrator's
// workers run them. Retry times are wake_at values on the same timer: there is no other.
// The transaction that records a success also claims the next step, so a saga whose
// participants answer at once runs without waiting for the timer.
//
// Starting. Run writes an instance and runs it in the caller's goroutine; Begin writes it
// and hands it to a worker. When a saga must exist exactly when some other write does (a
// trip that reaches trip_ended needs its payment saga), StartInTx writes it, its first
// attempt claimed, in the caller's transaction, and Drive runs it after the commit: a
// caller that dies in between leaves a claimed attempt whose lease ends, never a state
// without its saga.
//
// Participants (participant.go): LocalTx runs a Go function in the transaction that
// records its outcome (its writes commit exactly when the step is recorded); on a store
// with one writer, concurrent Runs are joined into one transaction (Config.JoinRuns,
// join.go), each in a savepoint of its own. Local runs a
// Go function outside any transaction of the orchestrator (it uses its own database handle
// and package barrier); HTTP calls a remote participant behind a circuit breaker. Every
// call carries the idempotency key of its operation, "<saga id>/<step name>/<phase>", the
// same on every retry (header Idempotency-Key over HTTP).
package saga
