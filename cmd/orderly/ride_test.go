package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestSimulateRideHailing runs `orderly simulate --flow ride_hailing` with every fault
// injected into the server's saga participants: no violation, every trip read at rest, and
// the money figures add up (what was held was captured or released).
func TestSimulateRideHailing(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).Run(context.Background(), []string{
		"orderly", "simulate", "--flow", "ride_hailing", "--orders", "60", "--rate", "200", "--json",
		"--fail-rate", "0.1", "--slow-rate", "0.05", "--timeout-after-apply-rate", "0.1",
	})
	if err != nil {
		t.Fatalf("simulate: %v\nstderr: %s", err, stderr.String())
	}
	var res struct {
		Orders     int      `json:"orders"`
		Violations []string `json:"violations"`
		Rides      struct {
			Trips    int            `json:"trips"`
			ByState  map[string]int `json:"by_state"`
			ByScript map[string]int `json:"by_script"`
			Captured int64          `json:"captured"`
			Released int64          `json:"released"`
		} `json:"rides"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout.String())
	}
	if len(res.Violations) != 0 || res.Orders != 60 || res.Rides.Trips != 60 {
		t.Fatalf("violations %v, orders %d, trips %d", res.Violations, res.Orders, res.Rides.Trips)
	}
	states := 0
	for _, n := range res.Rides.ByState {
		states += n
	}
	if states != 60 || res.Rides.ByState["settled"] == 0 || res.Rides.ByState["closed"] == 0 || res.Rides.Captured == 0 || res.Rides.Released == 0 {
		t.Fatalf("trips by state %v, captured %d, released %d", res.Rides.ByState, res.Rides.Captured, res.Rides.Released)
	}
}

// TestSimulateRideHailingOneInstance: trips need the one instance that holds their card
// holds, so several instances or kills are refused.
func TestSimulateRideHailingOneInstance(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).Run(context.Background(), []string{"orderly", "simulate", "--flow", "ride_hailing", "--kill-every", "5s"})
	if err == nil || !strings.Contains(err.Error(), "--flow ride_hailing runs on one instance") {
		t.Fatalf("--flow ride_hailing --kill-every 5s: %v", err)
	}
}

// TestSimulateFaultRates: a rate outside 0..1 is refused.
func TestSimulateFaultRates(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).Run(context.Background(), []string{"orderly", "simulate", "--fail-rate", "1.5", "--orders", "1"})
	if err == nil || !strings.Contains(err.Error(), "must be 0 to 1, got 1.5, 0 and 0") {
		t.Fatalf("--fail-rate 1.5: %v", err)
	}
}
