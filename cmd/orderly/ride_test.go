package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/internal/testenv"
)

// TestSimulateRideHailing runs `orderly simulate --flow ride_hailing` with every fault
// injected into the server's saga participants: no violation, every trip read at rest, and
// the money figures add up (what was held was captured or released).
func TestSimulateRideHailing(t *testing.T) {
	t.Parallel()
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
		SagaFaults int64    `json:"saga_faults_injected"`
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
	if len(res.Violations) != 0 || res.Orders != 60 || res.Rides.Trips != 60 || res.SagaFaults == 0 {
		t.Fatalf("violations %v, orders %d, trips %d, faults injected %d", res.Violations, res.Orders, res.Rides.Trips, res.SagaFaults)
	}
	states := 0
	for _, n := range res.Rides.ByState {
		states += n
	}
	if states != 60 || res.Rides.ByState["settled"] == 0 || res.Rides.ByState["closed"] == 0 || res.Rides.Captured == 0 || res.Rides.Released == 0 {
		t.Fatalf("trips by state %v, captured %d, released %d", res.Rides.ByState, res.Rides.Captured, res.Rides.Released)
	}
}

// TestSimulateRideHailingInstances: trips on three instances sharing one fresh PostgreSQL
// database, one SIGKILLed and restarted every 2 s, with faults and lost gateway replies:
// the simulated gateway's holds live in the database, so a trip's events and its sagas'
// retries reach its hold from any instance, a kill loses none, and every check holds.
func TestSimulateRideHailingInstances(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	bin := buildOrderly(t, t.TempDir())
	db := freshPostgres(t)
	stdout, stderr, err := runOrderly(t, bin, 4*time.Minute, "simulate", "--flow", "ride_hailing", "--database-url", db,
		"--instances", "3", "--kill-every", "2s", "--orders", "150", "--rate", "50", "--json",
		"--fail-rate", "0.05", "--timeout-after-apply-rate", "0.05")
	var res struct {
		Violations []string `json:"violations"`
		Kills      int      `json:"kills"`
		Rides      struct {
			Trips   int            `json:"trips"`
			ByState map[string]int `json:"by_state"`
		} `json:"rides"`
	}
	if jerr := json.Unmarshal(stdout, &res); jerr != nil {
		t.Fatalf("stdout: %v\n%s\nstderr:\n%s", jerr, stdout, stderr)
	}
	if err != nil || len(res.Violations) != 0 || res.Rides.Trips == 0 || res.Kills < 1 {
		t.Fatalf("simulate: %v; trips %d, kills %d, violations:\n%s\nstderr:\n%s", err, res.Rides.Trips, res.Kills,
			strings.Join(res.Violations, "\n"), stderr)
	}
	if res.Rides.ByState["settled"] == 0 || res.Rides.ByState["closed"] == 0 {
		t.Errorf("trips by state %v: want some settled and some closed", res.Rides.ByState)
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
