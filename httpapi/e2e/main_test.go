// Package e2e_test drives the HTTP API through a whole engine (engine.Open, the features,
// a database): the routes as a shop and an operator call them. It is a package of its own
// so that httpapi's in-package tests do not rebuild the engine for their test binary.
package e2e_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
