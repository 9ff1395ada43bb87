// Package browsertest loads the admin page in headless Chromium (chromedp) against a real
// engine. It is a module of its own so that chromedp and its protocol bindings stay out of
// the main module's `go test ./...`; CI runs it (docs/development.md).
package browsertest
