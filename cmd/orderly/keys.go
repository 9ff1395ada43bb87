package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/apikey"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/internal/redact"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// keysCommand is `orderly keys create|list|revoke`: the API keys of the HTTP API, in the
// database that the instances share (docs/operations/api-keys.md).
func keysCommand() *cli.Command {
	dbFlag := func() cli.Flag {
		return &cli.StringFlag{Name: "database-url", Value: "orderly.db", Usage: "SQLite file path (or sqlite:PATH), postgres://… or mysql://…", Sources: env("database-url")}
	}
	keys := &cli.Command{
		Name:  "keys",
		Usage: "create, list and revoke API keys (scopes buyer, merchant, admin)",
		Description: "A key reads ok_<id>_<secret>; only the SHA-256 of the secret is stored, so the key is shown once, by create.\n" +
			"Once any key exists (or --admin-token is set), every route but payment callbacks, channel webhooks, health,\n" +
			"metrics and the OpenAPI document needs Authorization: Bearer <key> with a scope the route takes.\n" +
			"Instances see a new or revoked key within " + apikey.DefaultCacheTTL.String() + ".",
		Commands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a key and print it (once)",
				ArgsUsage: " ",
				Flags: []cli.Flag{
					dbFlag(),
					&cli.StringFlag{Name: "name", Usage: "what the key is for, e.g. \"shop backend\""},
					&cli.StringSliceFlag{Name: "scope", Usage: "buyer, merchant or admin; repeat or comma-separate for several"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.String("name") == "" || len(cmd.StringSlice("scope")) == 0 {
						return usagef(cmd, "create needs --name and at least one --scope (buyer, merchant, admin)")
					}
					var scopes []string
					for _, s := range cmd.StringSlice("scope") {
						for part := range strings.SplitSeq(s, ",") {
							if part = strings.TrimSpace(part); part != "" {
								scopes = append(scopes, part)
							}
						}
					}
					return withKeys(ctx, cmd, false, func(svc *apikey.Service) error {
						k, key, err := svc.Create(ctx, cmd.String("name"), scopes)
						if err != nil {
							return cli.Exit(err.Error(), exitUsage)
						}
						w := cmd.Root().Writer
						fmt.Fprintf(w, "Created key %s (%s), scopes %s. The key is shown only now:\n  %s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), key)
						return nil
					})
				},
			},
			{
				Name:  "list",
				Usage: "list the keys (never their secrets), revoked ones too",
				Flags: []cli.Flag{dbFlag(), &cli.BoolFlag{Name: "json", Usage: `print [{"id","name","scopes","created_at","last_used_at"?,"revoked_at"?}]`}},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					return withKeys(ctx, cmd, true, func(svc *apikey.Service) error {
						keys, err := svc.List(ctx)
						if err != nil {
							return err
						}
						if cmd.Bool("json") {
							if keys == nil {
								keys = []*store.APIKey{}
							}
							return writeJSON(cmd.Root().Writer, keys)
						}
						printKeys(cmd.Root().Writer, keys)
						return nil
					})
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke a key for good (every instance refuses it within " + apikey.DefaultCacheTTL.String() + ")",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{dbFlag()},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.Args().Len() != 1 {
						return usagef(cmd, "revoke takes one key id (see 'orderly keys list')")
					}
					return withKeys(ctx, cmd, true, func(svc *apikey.Service) error {
						k, err := svc.Revoke(ctx, cmd.Args().First())
						if err != nil {
							return err
						}
						fmt.Fprintf(cmd.Root().Writer, "Revoked key %s (%s) at %s\n", k.ID, k.Name, k.RevokedAt.Format(time.RFC3339))
						return nil
					})
				},
			},
		},
	}
	for _, c := range keys.Commands {
		c.OnUsageError = onUsageError
	}
	return keys
}

// withKeys opens the database of --database-url (applying migrations) and runs fn with
// its key service. mustExist refuses a SQLite file that does not exist (list and revoke
// read keys: a mistyped path must not pass for a database without keys); create makes it,
// as serve and migrate do.
func withKeys(ctx context.Context, cmd *cli.Command, mustExist bool, fn func(svc *apikey.Service) error) error {
	logger, err := newLogger(cmd.Root(), cmd.Root().ErrWriter)
	if err != nil {
		return err
	}
	url := cmd.String("database-url")
	db, err := sqlstore.Open(ctx, sqlstore.Config{URL: url, MustExist: mustExist})
	if err != nil {
		return fmt.Errorf("open %s: %w", redact.URL(url), err)
	}
	defer db.Close()
	svc, err := apikey.New(apikey.Config{Store: db, Logger: logger})
	if err != nil {
		return err
	}
	return fn(svc)
}

// printKeys prints keys as a table.
func printKeys(w io.Writer, keys []*store.APIKey) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tLAST USED\tREVOKED")
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), k.CreatedAt.Format(time.RFC3339),
			at(k.LastUsedAt), at(k.RevokedAt))
	}
	_ = tw.Flush()
}

// logAccess says how the API is guarded: by tokens, or open — then on 127.0.0.1 only,
// unless an address was given (a warning).
func logAccess(ctx context.Context, logger *slog.Logger, e *engine.Engine, addrGiven bool) {
	on, err := e.AuthRequired(ctx)
	switch {
	case err != nil:
		logger.Warn("API access: could not read whether API keys exist", "error", err)
	case on:
		logger.Info("API access: every route but callbacks, health and metrics needs the admin token or an API key with the route's scope")
	case addrGiven:
		logger.Warn("API access: OPEN (no admin token, no API key) to anyone who can reach " + e.Addr() +
			"; create a key (orderly keys create) or set --admin-token; the admin routes (/v1/admin/…) are off")
	default:
		logger.Info("API access: open (no admin token, no API key), so listening on 127.0.0.1 only; " +
			"create a key (orderly keys create) or set --admin-token to listen on --addr; the admin routes (/v1/admin/…) are off")
	}
}
