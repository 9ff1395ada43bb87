// Package httpapi is orderly's HTTP adapter: the v1 REST API of docs/api.md over the
// service interfaces of the root package (orderly.OrderService, orderly.PaymentService,
// orderly.CatalogService), plus health, readiness, metrics and the OpenAPI document.
//
// Build a Server with New and serve Server.Handler:
//
//	srv := httpapi.New(httpapi.Config{Orders: orders, Payments: payments, Catalog: catalog,
//		CallbackSecret: secret, Logger: logger})
//	http.ListenAndServe(":8080", srv.Handler())
//
// Contract, in short:
//   - Request and response bodies are JSON. Request bodies must be application/json (or a
//     +json media type; 415 otherwise), at most Config.MaxBodyBytes long (413 otherwise), and
//     are decoded with JSON v2 semantics (decodeJSON): duplicate member names at any depth,
//     trailing data and wrong types are 422 invalid-input with a detail naming the field;
//     names are case-sensitive; unknown fields are 422 except in payment callbacks, where
//     they are ignored. Business rules are the services' job.
//   - Every request has a deadline (Config.RequestTimeout, 10 s). Lock waits, a busy
//     database and the deadline itself are answered 503 unavailable with Retry-After:
//     nothing was changed and the request may be sent again.
//   - Money is int64 minor units with an ISO 4217 currency; times are RFC 3339 UTC with
//     exactly three fractional digits ("2026-11-30T07:33:07.123Z", see Time).
//   - Errors are RFC 9457 application/problem+json (see Problem). The `type` URI ends with
//     the orderly error code; one table (problem.go) maps codes to HTTP statuses. Internal
//     errors and panics are logged and answered with a generic 500.
//   - Every response carries an Orderly-Trace-Id header: the trace id of a valid W3C
//     traceparent request header, or a new random one. It is passed to the services.
//   - POST /v1/payments/callback verifies the Orderly-Signature header (package payment)
//     over the raw body before anything is parsed.
//
// The full list of routes, with schemas, is the OpenAPI document served at /openapi.json
// (openapi.json in this directory); a test keeps it and the router in step.
package httpapi
