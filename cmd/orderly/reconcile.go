package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/reconcile"
)

// reconcileCommand is `orderly reconcile`: the reconciliation of package reconcile run once
// against a database (docs/operations/reconcile.md), or a settlement statement compared with
// its payments.
func reconcileCommand() *cli.Command {
	return &cli.Command{
		Name:  "reconcile",
		Usage: "find (and with --repair, repair) disagreements between orders, payments, stock, coupons and the outbox",
		Description: "Exits 0 when nothing is left to do (no finding, or every finding repaired), 1 when a finding needs an operator,\n" +
			"2 for a usage or input error (nothing was done).\n" +
			"Repairs go through the services and are audited (operator \"reconcile\"); refunds they request leave through the\n" +
			"outbox of the running instances. A repair that fails leaves its finding with the error and the others go on.\n" +
			"With --statement and --channel, also compares that channel's settlement CSV (channel_txn_id, amount, currency,\n" +
			"status, time; an optional type) with the channel's payments and refunds (a line is a refund when its status is\n" +
			"refunded or refund, or its type is refund; the wallet's and other channels' are left out). Every run's report is\n" +
			"kept in reconcile_reports, where the admin page and GET /v1/admin/reconcile/reports read it.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "database-url", Value: "orderly.db", Usage: "SQLite file path (or sqlite:PATH), postgres://… or mysql://…", Sources: env("database-url")},
			&cli.BoolFlag{Name: "repair", Usage: "repair what can be repaired (through the state machine and the services, audited)"},
			&cli.StringFlag{Name: "since", Usage: "look only at orders and payments created since this RFC 3339 time or this long ago (e.g. 24h); stock and outbox are always checked whole"},
			&cli.StringFlag{Name: "statement", Usage: "a settlement statement CSV to compare with the payments and refunds of --channel"},
			&cli.StringFlag{Name: "channel", Usage: "the channel whose statement --statement is (stripe, alipay, wechat, …; required with --statement)"},
			&cli.DurationFlag{Name: "refund-stuck-after", Value: reconcile.DefaultRefundStuckAfter, Usage: "a refund the provider accepted and never confirmed, older than this, is a refund_stuck finding"},
			&cli.BoolFlag{Name: "json", Usage: `print {"findings":[{"kind","order_id"?,"sku"?,"detail","repaired"}],…}`},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			since, err := parseSince(cmd.String("since"), time.Now())
			if err != nil {
				return cli.Exit("--since: "+err.Error(), exitUsage)
			}
			if err := reconcileFlags(cmd); err != nil {
				return err
			}
			logger, err := newLogger(cmd.Root(), cmd.Root().ErrWriter)
			if err != nil {
				return err
			}
			e, err := engine.Open(ctx, engine.Config{DatabaseURL: cmd.String("database-url"), DatabaseMustExist: true,
				CallbackSecret: []byte("unused"), Logger: logger, ReconcileRefundStuckAfter: cmd.Duration("refund-stuck-after")}, features.All()...)
			if err != nil {
				return flagError(err)
			}
			defer e.Close(context.WithoutCancel(ctx))
			rep, err := e.Reconciler().Run(ctx, reconcile.RunOptions{Repair: cmd.Bool("repair"), Since: since,
				By: reconcile.Actor{Operator: reconcile.OperatorReconcile}})
			if err != nil {
				return err
			}
			if path := cmd.String("statement"); path != "" {
				lines, err := readStatement(path)
				if err != nil {
					return err
				}
				fs, err := e.Reconciler().Statement(ctx, cmd.String("channel"), lines)
				if err != nil {
					return err
				}
				rep.Findings = append(rep.Findings, fs...)
				rep.Scanned += int64(len(lines))
				rep.FinishedAt = time.Now().UTC()
			}
			// Kept where the admin page reads the periodic job's reports.
			if err := e.Reconciler().SaveReport(ctx, "orderly reconcile on "+e.Config().InstanceID, rep, nil); err != nil {
				return err
			}
			out := cmd.Root().Writer
			if cmd.Bool("json") {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				printFindings(out, rep)
			}
			for _, f := range rep.Findings {
				if !f.Repaired {
					return cli.Exit("", exitFailure)
				}
			}
			return nil
		},
	}
}

// reconcileFlags checks --statement with --channel, and --refund-stuck-after. A statement
// is one channel's and the channel is named, never guessed: a statement carries no
// channel, and a wrong guess would report every capture of the right one as missing.
// --channel alone is refused too.
func reconcileFlags(cmd *cli.Command) error {
	path, ch := cmd.String("statement"), cmd.String("channel")
	switch {
	case path != "" && ch == "":
		return usagef(cmd, "--statement needs --channel: the channel whose statement it is (stripe, alipay, wechat, …)")
	case path == "" && ch != "":
		return usagef(cmd, "--channel names the channel of a --statement; give the statement too")
	case strings.Contains(ch, "@"):
		return usagef(cmd, "--channel %q: name the channel, not a variant (a statement covers all its variants)", ch)
	case ch == payment.WalletChannel:
		return usagef(cmd, "--channel wallet: wallet payments are ledger transfers, on no provider's statement")
	case cmd.Duration("refund-stuck-after") <= 0:
		return usagef(cmd, "--refund-stuck-after must be positive, got %s", cmd.Duration("refund-stuck-after"))
	}
	return nil
}

// parseSince reads --since: an RFC 3339 time, or a duration back from now; zero when empty.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("want an RFC 3339 time (2026-11-30T00:00:00Z) or a positive duration (24h), got %q", v)
	}
	return now.Add(-d).UTC(), nil
}

func readStatement(path string) ([]reconcile.StatementLine, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the operator names the statement file on the command line
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return reconcile.ReadStatement(f)
}

// printFindings prints one line per finding and a summary.
func printFindings(w io.Writer, rep *reconcile.Report) {
	for _, f := range rep.Findings {
		what := f.OrderID
		switch {
		case f.SKU != "":
			what = "sku " + f.SKU
		case what == "" && f.Target != "":
			what = f.Target // a transaction, a hold, an account, a message id
		case what == "":
			what = "-"
		}
		state, detail := "found", f.Detail
		switch {
		case f.Repaired:
			state = "repaired"
		case f.Error != "":
			state, detail = "failed", detail+" (repair failed: "+f.Error+")"
		}
		fmt.Fprintf(w, "%-9s %-26s %s: %s\n", state, f.Kind, what, detail)
	}
	fmt.Fprintf(w, "%d findings, %d repaired, %d rows scanned\n", len(rep.Findings), rep.Repaired, rep.Scanned)
}
