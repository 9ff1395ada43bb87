package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/bench"
)

// peersBinary is the program of bench/peers (its own Go module), which `bench --peers` runs.
const peersBinary = "orderly-peers"

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "run named performance scenarios against `orderly serve` child processes and print their figures",
		ArgsUsage: "[scenario …] (" + strings.Join(bench.Scenarios, ", ") + "; default: all)",
		Description: "Each scenario starts its own servers on a new database: a temporary SQLite file, or a new schema of\n" +
			"the PostgreSQL database of --database-url (dropped at the end). Figures are read from the database (lateness =\n" +
			"closed_at − close_at on its clock) and from /proc (server CPU seconds, peak RSS). Exits 1 when a run broke an\n" +
			"invariant (an early close, stock oversold, a release not applied): its figures do not count.\n" +
			"--peers runs the same steady and burst work with River, asynq and a periodic scan through the " + peersBinary + "\n" +
			"program (go build -C bench/peers -o <dir of orderly>/" + peersBinary + " .).",
		Flags: benchFlags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			names := cmd.Args().Slice()
			if len(names) == 0 {
				names = bench.Scenarios
			}
			for _, n := range names {
				if !slices.Contains(bench.Scenarios, n) {
					return usagef(cmd, "unknown scenario %q (one of %s)", n, strings.Join(bench.Scenarios, ", "))
				}
			}
			if err := positiveFlags(cmd, "duration", "payment-timeout", "burst-lead"); err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := benchConfig(cmd, self)
			if cfg.CPUProfileDir != "" { // with --peers too: its servers write there
				if err := os.MkdirAll(cfg.CPUProfileDir, 0o750); err != nil {
					return err
				}
			}
			if cmd.Bool("peers") {
				return runPeers(ctx, cmd, self)
			}
			var violations []string
			for _, name := range names {
				out, err := bench.Run(ctx, name, cfg)
				if err != nil {
					return err
				}
				if cmd.Bool("json") {
					err = bench.WriteJSON(cmd.Root().Writer, out.Result)
				} else {
					err = bench.WriteTable(cmd.Root().Writer, out.Result)
				}
				if err != nil {
					return err
				}
				for _, v := range out.Violations {
					violations = append(violations, name+": "+v)
				}
			}
			if len(violations) > 0 {
				return cli.Exit("violations (these figures do not count):\n  "+strings.Join(violations, "\n  "), exitFailure)
			}
			return nil
		},
	}
}

func benchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "database-url", Usage: "empty: SQLite in a temporary directory; postgres://…: a new schema there per run"},
		&cli.StringFlag{Name: "timer", Value: "db", Usage: "the servers' --timer: db or redis"},
		&cli.StringFlag{Name: "redis-url", Usage: "Redis for --timer redis (and asynq with --peers), e.g. redis://127.0.0.1:6379/0"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object per scenario, one per line"},
		&cli.BoolFlag{Name: "peers", Usage: "run steady and burst with River, asynq and a 15 s periodic scan beside orderly (runs " + peersBinary + ")"},
		&cli.StringFlag{Name: "cpu-profile-dir", Usage: "each server writes a CPU profile of its run here"},
		&cli.Float64Flag{Name: "rate", Value: 1000, Usage: "steady: orders created per second"},
		&cli.DurationFlag{Name: "duration", Value: 20 * 1e9, Usage: "steady: how long orders are created"},
		&cli.IntFlag{Name: "paid", Value: 30, Usage: "steady: percent of orders paid at once"},
		&cli.DurationFlag{Name: "payment-timeout", Value: 2 * 1e9, Usage: "steady: time to pay of the unpaid orders (whole seconds)"},
		&cli.IntFlag{Name: "burst", Value: 100_000, Usage: "burst: orders due in the same millisecond"},
		&cli.DurationFlag{Name: "burst-lead", Value: 5 * 1e9, Usage: "burst: how far ahead of the database clock the deadline is set before the server starts"},
		&cli.IntFlag{Name: "flash-stock", Value: 5000, Usage: "flash-sale: units of the one SKU"},
		&cli.IntFlag{Name: "flash-buyers", Value: 20_000, Usage: "flash-sale: buyers, one order each"},
		&cli.IntFlag{Name: "workers", Value: 64, Usage: "flash-sale, notify: requests in flight"},
		&cli.IntFlag{Name: "history-orders", Value: 10_000_000, Usage: "history: closed orders loaded before the steady run"},
		&cli.IntFlag{Name: "pending-orders", Value: 1_000_000, Usage: "pending: open orders at rest"},
		&cli.IntFlag{Name: "pending-baseline", Value: 1000, Usage: "pending: open orders of the reference run"},
		&cli.IntFlag{Name: "notify-orders", Value: 20_000, Usage: "notify: creates"},
		&cli.IntFlag{Name: "instances", Value: 3, Usage: "notify: servers on PostgreSQL (SQLite: 1)"},
	}
}

func benchConfig(cmd *cli.Command, self string) bench.Config {
	return bench.Config{
		Binary: self, DatabaseURL: cmd.String("database-url"), Timer: cmd.String("timer"), RedisURL: cmd.String("redis-url"),
		CPUProfileDir: cmd.String("cpu-profile-dir"), Progress: cmd.Root().ErrWriter,
		Rate: cmd.Float64("rate"), Duration: cmd.Duration("duration"), PaidPercent: cmd.Int("paid"), PaymentTimeout: cmd.Duration("payment-timeout"),
		Burst: cmd.Int("burst"), BurstLead: cmd.Duration("burst-lead"), FlashStock: cmd.Int("flash-stock"), FlashBuyers: cmd.Int("flash-buyers"),
		Workers: cmd.Int("workers"), HistoryOrders: cmd.Int("history-orders"), PendingOrders: cmd.Int("pending-orders"),
		PendingBaseline: cmd.Int("pending-baseline"), NotifyOrders: cmd.Int("notify-orders"), Instances: cmd.Int("instances"),
	}
}

// runPeers runs the peers program (next to this executable, else on PATH) with this
// command's arguments less --peers, telling it which orderly binary to run.
func runPeers(ctx context.Context, cmd *cli.Command, self string) error {
	path := filepath.Join(filepath.Dir(self), peersBinary)
	if _, err := os.Stat(path); err != nil {
		if path, err = exec.LookPath(peersBinary); err != nil {
			return fmt.Errorf("--peers needs the %s program next to orderly or on PATH; build it with: go build -C bench/peers -o %s",
				peersBinary, filepath.Join(filepath.Dir(self), peersBinary))
		}
	}
	args := []string{"--orderly-binary", self}
	rest := os.Args[slices.Index(os.Args, "bench")+1:]
	for _, a := range rest {
		if a != "--peers" && a != "-peers" && a != "--peers=true" {
			args = append(args, a)
		}
	}
	c := exec.CommandContext(ctx, path, args...) //nolint:gosec // the peers program, with our own arguments
	c.Stdout, c.Stderr = cmd.Root().Writer, cmd.Root().ErrWriter
	if err := c.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return cli.Exit("", ee.ExitCode())
		}
		return err
	}
	return nil
}

// startCPUProfile starts writing a CPU profile to path; stop ends it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path) //nolint:gosec // a path the operator gave
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}
