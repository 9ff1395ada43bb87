// Package client is the Go client of the orderly HTTP API, generated from its OpenAPI
// document (openapi.json, the copy of httpapi/openapi.json this version was made from) by
// oapi-codegen. NewClientWithResponses gives one method per operation, named by its
// operationId (CreateOrderWithResponse, StartPaymentWithResponse, ListEventsWithResponse, …),
// whose result holds the decoded body of each documented status: JSON200, JSON201, and
// ApplicationproblemJSON4xx / 5xx for an RFC 9457 problem (its Type is the stable problem
// type). Money is int64 minor units; times are UTC.
//
// See ExampleNewClientWithResponses and docs/client.md in the orderly repository.
package client

import (
	"context"
	"net/http"
)

// WithBearerToken sends token as "Authorization: Bearer <token>" on every request: an API
// key (orderly keys create) or the admin token.
func WithBearerToken(token string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}

// Ptr returns a pointer to v: the generated types take optional members as pointers.
func Ptr[T any](v T) *T { return &v }
