// Package mock provides test doubles of orderly's service interfaces in the style of WTF
// Dial: each mock has one function field per interface method (OrderService.CreateOrderFn
// for CreateOrder, …) that a test sets to the behaviour it needs. Calling a method whose
// function field is nil panics with a message naming it, so an unexpected call fails loudly.
//
// The mocks do not synchronise: set the function fields before handing a mock to the code
// under test, and synchronise inside the functions if they are called concurrently.
package mock

import "fmt"

// unset panics for a call to a method whose function field was not set.
func unset(method string) {
	panic(fmt.Sprintf("mock: %s called but %sFn is not set", method, method))
}
