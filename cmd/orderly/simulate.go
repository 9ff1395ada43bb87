package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/simulate"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/verify"
)

func simulateCommand() *cli.Command {
	return &cli.Command{
		Name:  "simulate",
		Usage: "drive realistic traffic against a server and check every invariant",
		Description: "Without --target, starts an in-process server on a temporary SQLite database.\n" +
			"Exits 1 when an invariant is violated or an order closed early.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "target", Usage: "base URL of a running server (default: start one in process)", Sources: env("target")},
			&cli.StringFlag{Name: "callback-secret", Usage: "the target's callback secret (required with --target)", Sources: env("callback-secret")},
			&cli.StringFlag{Name: "database-url", Usage: "the target's database, to run the database checks too (optional with --target)", Sources: env("database-url")},
			&cli.IntFlag{Name: "orders", Value: simulate.DefaultOrders, Usage: "number of orders"},
			&cli.FloatFlag{Name: "rate", Value: 200, Usage: "orders per second"},
			&cli.DurationFlag{Name: "payment-timeout", Value: simulate.DefaultPaymentTimeout, Usage: "each order's time to pay (whole seconds)"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed of the traffic plan"},
			&cli.IntFlag{Name: "concurrency", Value: simulate.DefaultConcurrency, Usage: "HTTP requests in flight"},
			&cli.BoolFlag{Name: "json", Usage: "print only the JSON result on stdout"},
		},
		Action: runSimulate,
	}
}

func runSimulate(ctx context.Context, cmd *cli.Command) error {
	root := cmd.Root()
	cfg := simulate.Config{
		Target: cmd.String("target"), CallbackSecret: []byte(cmd.String("callback-secret")),
		Orders: cmd.Int("orders"), Rate: cmd.Float("rate"), PaymentTimeout: cmd.Duration("payment-timeout"),
		Seed: cmd.Int64("seed"), Concurrency: cmd.Int("concurrency"),
	}
	if !cmd.Bool("json") && isTerminal(root.ErrWriter) {
		cfg.Progress = root.ErrWriter
	}
	if cfg.Target == "" {
		dir, err := os.MkdirTemp("", "orderly-simulate-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		logger := slog.New(slog.NewTextHandler(root.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn}))
		srv, err := OpenServer(ctx, ServerConfig{
			Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(dir, "orderly.db"), CallbackSecret: []byte(newSecret()), Logger: logger,
		})
		if err != nil {
			return err
		}
		defer srv.Close()
		cfg.Target, cfg.CallbackSecret, cfg.Store = srv.URL(), srv.cfg.CallbackSecret, srv.Store
	} else {
		if len(cfg.CallbackSecret) == 0 {
			return cli.Exit("--callback-secret is required with --target", 2)
		}
		if url := cmd.String("database-url"); url != "" {
			db, err := sqlstore.Open(ctx, sqlstore.Config{URL: url, SkipMigrate: true})
			if err != nil {
				return err
			}
			defer db.Close()
			cfg.Store = db
		}
	}
	res, err := simulate.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if cmd.Bool("json") {
		if err := writeJSON(root.Writer, res); err != nil {
			return err
		}
	} else {
		fmt.Fprint(root.Writer, res.Summary())
	}
	if len(res.Violations) > 0 || res.EarlyCloses > 0 {
		return cli.Exit(fmt.Sprintf("simulate: %d violations, %d early closes", len(res.Violations), res.EarlyCloses), 1)
	}
	return nil
}

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check invariants I1–I7 against a database at rest",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "database-url", Value: "orderly.db", Usage: "SQLite file path (or sqlite:PATH)", Sources: env("database-url")},
			&cli.DurationFlag{Name: "tolerance", Value: verify.DefaultTolerance, Usage: "how overdue an open order may be"},
			&cli.BoolFlag{Name: "require-drained", Usage: "treat pending outbox messages as violations"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			db, err := sqlstore.Open(ctx, sqlstore.Config{URL: cmd.String("database-url"), SkipMigrate: true})
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := verify.Check(ctx, store.Store(db), verify.Options{
				Tolerance: cmd.Duration("tolerance"), RequireDrained: cmd.Bool("require-drained"),
			})
			if err != nil {
				return err
			}
			out := cmd.Root().Writer
			if cmd.Bool("json") {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "orders: %d %v\npayments: %d %v\noutbox: %v\nearly closes: %d, overdue: %d\n",
					rep.Orders, rep.OrdersByState, rep.Payments, rep.PaymentsByState, rep.OutboxByState, rep.EarlyCloses, rep.Overdue)
				for _, v := range rep.Violations {
					fmt.Fprintln(out, "violation:", v)
				}
			}
			if !rep.OK() || rep.EarlyCloses > 0 {
				return cli.Exit(fmt.Sprintf("verify: %d violations", len(rep.Violations)+rep.ViolationsOmitted), 1)
			}
			if !cmd.Bool("json") {
				fmt.Fprintln(out, "all invariants hold")
			}
			return nil
		},
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
