// Command orderly is the order-lifecycle engine: `orderly serve` runs the HTTP API and the
// background workers on an embedded SQLite database, `orderly migrate` applies the schema,
// `orderly simulate` drives realistic traffic and checks every invariant, and `orderly
// verify` checks the invariants of a database at rest. Every flag can also be set with an
// ORDERLY_* environment variable. This package only parses flags and prints: the engine is
// composed in package engine, the multi-instance supervisor of `simulate --instances` lives
// in package simulate/cluster (docs/architecture.md).
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/redact"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses of the program, the same for every command (docs/operations/configuration.md).
const (
	exitOK      = 0
	exitFailure = 1 // the command failed, or found violations or findings (simulate, verify, reconcile, bench)
	// exitUsage: a command line or input the program does not take (an unknown command,
	// flag or argument, a bad flag value, an unsupported database URL, a database file that
	// does not exist for a command that reads one): nothing was done.
	exitUsage = 2
)

// run runs the program with args (args[0] is its name) and returns its exit status. An
// error is printed once, on one line, as "orderly: <message>".
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := newApp(stdout, stderr).Run(ctx, args)
	if err == nil {
		return exitOK
	}
	msg := err.Error()
	// A domain error's code ("[invalid-input]") is for programs; people read the message.
	if code := orderly.ErrorCode(err); code != orderly.EINTERNAL {
		msg = strings.Replace(msg, " ["+code+"]", "", 1)
	}
	if msg != "" {
		fmt.Fprintln(stderr, "orderly:", msg)
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	// Input the program refused before doing anything (the store's EINVALID: a database
	// URL it does not take, a file or directory that does not exist) is a usage error.
	if orderly.ErrorCode(err) == orderly.EINVALID {
		return exitUsage
	}
	return exitFailure
}

// usageError is a command line the program does not take (an unknown flag or command, a
// flag value that does not parse); it exits with status 2.
type usageError struct {
	msg string
}

func (e *usageError) Error() string { return e.msg }

// ExitCode implements cli.ExitCoder.
func (e *usageError) ExitCode() int { return exitUsage }

// usagef returns a usageError about cmd: the message, then where to find the usage.
func usagef(cmd *cli.Command, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...) + fmt.Sprintf("; see '%s --help'", cmd.FullName())}
}

// undefinedFlag matches the flag parser's error for a flag no command defines.
var undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)

// invalidValue matches the flag parser's error for a value that does not parse, with the
// parser's function name dropped from the cause.
var invalidValue = regexp.MustCompile(`^invalid value (".*") for flag -+(\S+): (?:[a-z]+\.[A-Za-z]+: )?(.*)$`)

// onUsageError turns the flag parser's errors into one short line (instead of cli's whole
// help and the error twice): the unknown flag with the nearest defined one, or the parse
// error, and the hint to --help.
func onUsageError(_ context.Context, cmd *cli.Command, err error, _ bool) error {
	if m := undefinedFlag.FindStringSubmatch(err.Error()); m != nil {
		name := m[1]
		if s := strings.TrimLeft(cli.SuggestFlag(cmd.Flags, name, false), "-"); s != "" && similar(name, s) {
			return usagef(cmd, "unknown flag --%s (did you mean --%s?)", name, s)
		}
		return usagef(cmd, "unknown flag --%s", name)
	}
	if m := invalidValue.FindStringSubmatch(err.Error()); m != nil {
		return usagef(cmd, "invalid value %s for --%s: %s", m[1], m[2], m[3])
	}
	return usagef(cmd, "%v", err)
}

// similar reports whether a typed flag name is close enough to a defined one to suggest
// it: at most a third of its letters (at least one) differ, by Levenshtein distance.
func similar(typed, name string) bool {
	a, b := []rune(typed), []rune(name)
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)] <= max(1, len(b)/3)
}

// stampedVersion is set at link time by release builds and the Dockerfile
// (-ldflags "-X main.stampedVersion=v1.2.0"); empty, the build information decides.
var stampedVersion string

// version is the version of the binary: stamp when set, else the module version (a tag
// when installed with go install module@version; a pseudo-version holding the revision,
// or "(devel)", when built in a checkout), followed by the VCS revision it was built from
// (with "-modified" for uncommitted changes) when the build recorded one and the version
// does not already show it, and the Go version.
func version(stamp string, info *debug.BuildInfo, ok bool) string {
	if !ok {
		return cmp.Or(stamp, "unknown") + " (no build information)"
	}
	v := cmp.Or(stamp, info.Main.Version, "(devel)")
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-modified"
			}
		}
	}
	// Go 1.24+ stamps a checkout's version as a pseudo-version holding the revision.
	if rev != "" && !strings.Contains(v, rev) {
		return fmt.Sprintf("%s (revision %s%s, %s)", v, rev, modified, info.GoVersion)
	}
	return fmt.Sprintf("%s (%s)", v, info.GoVersion)
}

// env names the ORDERLY_* variable of a flag.
func env(flag string) cli.ValueSourceChain {
	return cli.EnvVars("ORDERLY_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_")))
}

func newApp(stdout, stderr io.Writer) *cli.Command {
	info, ok := debug.ReadBuildInfo()
	app := &cli.Command{
		Name:      "orderly",
		Usage:     "order-lifecycle engine: orders, payments and timeouts that never disagree",
		Version:   version(stampedVersion, info, ok),
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", Sources: env("log-level")},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", Sources: env("log-format")},
		},
		Commands: []*cli.Command{serveCommand(nil), migrateCommand(), simulateCommand(), verifyCommand(), reconcileCommand(), benchCommand(), keysCommand(), imitateCommand()},
		// run prints errors and exits; cli would print an ExitCoder's message and exit itself.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Present() {
				name := cmd.Args().First()
				if s := cli.SuggestCommand(cmd.Commands, name); s != "" && similar(name, s) {
					return usagef(cmd, "unknown command %q (did you mean %s?)", name, s)
				}
				return usagef(cmd, "unknown command %q", name)
			}
			return cli.ShowRootCommandHelp(cmd)
		},
	}
	// The log flags are checked before any command runs, also by commands that log nothing.
	app.Before = func(ctx context.Context, cmd *cli.Command) (context.Context, error) {
		if _, err := newLogger(cmd, io.Discard); err != nil {
			return ctx, usagef(cmd, "%v", err)
		}
		return ctx, nil
	}
	strictArgs(app.Commands)
	for _, c := range append([]*cli.Command{app}, app.Commands...) {
		c.OnUsageError = onUsageError
	}
	return app
}

// strictArgs makes every command in cmds (and below) refuse what it does not take: a
// command with subcommands an unknown one, a command without ArgsUsage any argument
// (cli would otherwise ignore them, or exit 3 for an unknown subcommand).
func strictArgs(cmds []*cli.Command) {
	for _, c := range cmds {
		strictArgs(c.Commands)
		switch {
		case len(c.Commands) > 0 && c.Action == nil:
			c.Action = func(_ context.Context, cmd *cli.Command) error {
				if name := cmd.Args().First(); name != "" {
					return usagef(cmd, "unknown command %q", name)
				}
				return cli.ShowSubcommandHelp(cmd)
			}
		case strings.TrimSpace(c.ArgsUsage) == "" && c.Action != nil:
			action := c.Action
			c.Action = func(ctx context.Context, cmd *cli.Command) error {
				if cmd.Args().Present() {
					return usagef(cmd, "unexpected argument %q (%s takes flags only)", cmd.Args().First(), cmd.Name)
				}
				return action(ctx, cmd)
			}
		}
	}
}

// serveFlags are the flags of `serve`, shared with `simulate` for its in-process server.
func serveFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "addr", Value: ":8080", Usage: "HTTP listen address", Sources: env("addr")},
		&cli.StringFlag{Name: "database-url", Value: "orderly.db", Usage: "SQLite file path (or sqlite:PATH), postgres://… or mysql://…", Sources: env("database-url")},
		&cli.BoolFlag{Name: "migrate", Value: true, Usage: "apply pending database migrations at start; --migrate=false refuses a schema that lacks any (apply them with `orderly migrate`)", Sources: env("migrate")},
		&cli.IntFlag{Name: "database-max-conns", Value: engine.DefaultDatabaseMaxConns, Usage: "PostgreSQL/MySQL connections of this instance (keep instances × this under the server's limit)", Sources: env("database-max-conns")},
		&cli.DurationFlag{Name: "database-lock-timeout", Value: sqlstore.DefaultLockTimeout, Usage: "how long a PostgreSQL/MySQL statement waits for a row lock (negative: the server's setting)", Sources: env("database-lock-timeout")},
		&cli.DurationFlag{Name: "database-idle-in-transaction-timeout", Value: sqlstore.DefaultIdleInTransactionTimeout, Usage: "the database ends a session idle this long inside a transaction, releasing its locks: bounds how long a stopped instance blocks the others (PostgreSQL, MariaDB; negative: the server's setting)", Sources: env("database-idle-in-transaction-timeout")},
		&cli.StringFlag{Name: "redis-prefix", Value: "orderly", Usage: "key prefix of the delay queue; one per database sharing a Redis", Sources: env("redis-prefix")},
		&cli.StringFlag{Name: "instance-id", Usage: "name of this instance in leases and job runs (default host:pid)", Sources: env("instance-id")},
		&cli.StringFlag{Name: "timer", Value: "db", Usage: "what drives the precise timer: db or redis", Sources: env("timer")},
		&cli.StringFlag{Name: "redis-url", Usage: "Redis for --timer redis, e.g. redis://127.0.0.1:6379/0", Sources: env("redis-url")},
		&cli.StringFlag{Name: "nats-url", Usage: "NATS JetStream to publish outbox events to, e.g. nats://127.0.0.1:4222", Sources: env("nats-url")},
		&cli.StringFlag{Name: "nats-stream", Value: "ORDERLY", Usage: "the JetStream stream of --nats-url's events", Sources: env("nats-stream")},
		&cli.StringFlag{Name: "nats-subject-prefix", Value: "orderly", Usage: "the subject prefix of --nats-url's events: <prefix>.<topic>", Sources: env("nats-subject-prefix")},
		&cli.DurationFlag{Name: "timer-poll", Usage: "cap of the timer's sleep (0: 200ms on MySQL and with --timer redis, 5s elsewhere)", Sources: env("timer-poll")},
		&cli.StringFlag{Name: "admin-token", Usage: "bearer token with every scope (buyer, merchant, admin); with it or an API key (orderly keys) every route but callbacks, health and metrics needs a bearer token", Sources: env("admin-token")},
		&cli.StringFlag{Name: "callback-secret", Usage: "HMAC secret of payment callbacks; generated and printed once when empty", Sources: env("callback-secret")},
		&cli.DurationFlag{Name: "request-timeout", Value: engine.DefaultRequestTimeout, Usage: "server-side deadline of every HTTP request; past it the request is answered 503 with Retry-After", Sources: env("request-timeout")},
		&cli.DurationFlag{Name: "payment-timeout", Value: engine.DefaultPaymentTimeout, Usage: "default time a buyer has to pay (at most 168h)", Sources: env("payment-timeout")},
		&cli.DurationFlag{Name: "grace-period", Usage: "extra time after the payment deadline before closing (close_at = expires_at + grace)", Sources: env("grace-period")},
		&cli.DurationFlag{Name: "sweep-interval", Value: engine.DefaultSweepInterval, Usage: "period of the sweep that closes what the timer missed", Sources: env("sweep-interval")},
		&cli.DurationFlag{Name: "deep-check-interval", Value: engine.DefaultDeepCheckInterval, Usage: "period of the deep consistency check", Sources: env("deep-check-interval")},
		&cli.DurationFlag{Name: "inspection-hold", Value: engine.DefaultInspectionHold, Usage: "how long after close_at a payment of unknown outcome keeps its order open", Sources: env("inspection-hold")},
		&cli.IntFlag{Name: "close-batch-size", Value: engine.DefaultCloseBatchSize, Usage: "orders closed per transaction", Sources: env("close-batch-size")},
		&cli.IntFlag{Name: "create-batch", Value: engine.DefaultCreateBatch, Usage: "most concurrent creates of one-line orders of one SKU joined into one transaction (1: one each)", Sources: env("create-batch")},
		&cli.IntFlag{Name: "create-queue", Value: engine.DefaultCreateQueue, Usage: "most creates of one SKU waiting in this instance; past it a create is answered 503 with Retry-After at once", Sources: env("create-queue")},
		&cli.Int64Flag{Name: "outbox-max-attempts", Value: engine.DefaultOutboxMaxAttempts, Usage: "delivery attempts before an outbox message is dead", Sources: env("outbox-max-attempts")},
		&cli.DurationFlag{Name: "outbox-poll-interval", Value: engine.DefaultOutboxPollInterval, Usage: "how often the relay looks for due messages when not woken", Sources: env("outbox-poll-interval")},
		&cli.DurationFlag{Name: "outbox-retention", Value: engine.DefaultOutboxRetention, Usage: "how long delivered outbox messages are kept", Sources: env("outbox-retention")},
		&cli.DurationFlag{Name: "idempotency-key-ttl", Value: engine.DefaultIdempotencyKeyTTL, Usage: "how long the answer of a POST sent with an Idempotency-Key is kept", Sources: env("idempotency-key-ttl")},
		&cli.DurationFlag{Name: "webhook-timeout", Value: engine.DefaultWebhookTimeout, Usage: "bound of one merchant webhook delivery; slower is a failed attempt, retried", Sources: env("webhook-timeout")},
		&cli.IntFlag{Name: "webhook-concurrency", Value: engine.DefaultWebhookConcurrency, Usage: "webhook deliveries run at once (each subscriber gets an order's events in order)", Sources: env("webhook-concurrency")},
		&cli.DurationFlag{Name: "reconcile-interval", Value: engine.DefaultReconcileInterval, Usage: "period of the reconciliation job (report in reconcile_reports, repairs audited)", Sources: env("reconcile-interval")},
		&cli.StringFlag{Name: "stripe-api-key", Usage: "Stripe secret API key (sk_…); turns the stripe channel on (webhook: POST /v1/channels/stripe/webhook)", Sources: env("stripe-api-key")},
		&cli.StringFlag{Name: "stripe-webhook-secret", Usage: "signing secret(s) of the Stripe webhook endpoint (whsec_…), comma-separated while rolling the secret", Sources: env("stripe-webhook-secret")},
		&cli.StringFlag{Name: "stripe-api-url", Usage: "Stripe API address (default https://api.stripe.com; an imitation in tests)", Sources: env("stripe-api-url")},
		&cli.StringFlag{Name: "default-channel", Usage: "channel of payment attempts that name none (e.g. stripe); required with a real channel; empty without one: the simulated channel sim", Sources: env("default-channel")},
		&cli.BoolFlag{Name: "enable-sim-channel", Usage: "also serve the simulated channel sim beside the real channels (it moves no money: for staging and demos, never for real buyers); without a real channel sim is served anyway", Sources: env("enable-sim-channel")},
		&cli.DurationFlag{Name: "channel-call-timeout", Usage: "bound of each call to a payment provider (0: 10s)", Sources: env("channel-call-timeout")},
	}, cnChannelFlags()...)
}

// channels returns the payment channels serve's flags turn on: Stripe, Alipay and WeChat
// Pay. Errors: a channel with some of its flags but not all that it needs is half
// configured (a Stripe key without a webhook secret would refuse every webhook, a secret
// without a key would be ignored); see also cnChannels.
func channels(cmd *cli.Command) ([]channel.Adapter, error) {
	var out []channel.Adapter
	if cmd.IsSet("stripe-api-key") || cmd.IsSet("stripe-webhook-secret") || cmd.IsSet("stripe-api-url") {
		if err := required(cmd, "stripe-api-key", "stripe-webhook-secret"); err != nil {
			return nil, err
		}
		key := cmd.String("stripe-api-key")
		// A publishable key (pk_…) cannot create intents: every payment would fail at its create.
		if !strings.HasPrefix(key, "sk_") && !strings.HasPrefix(key, "rk_") {
			return nil, errors.New("--stripe-api-key must be a secret key (sk_…) or a restricted key (rk_…), not a publishable key or another value")
		}
		var secrets []string
		for sec := range strings.SplitSeq(cmd.String("stripe-webhook-secret"), ",") {
			if sec = strings.TrimSpace(sec); sec != "" {
				if !strings.HasPrefix(sec, "whsec_") {
					return nil, errors.New("--stripe-webhook-secret must be the endpoint's signing secret (whsec_…), comma-separated while rolling it")
				}
				secrets = append(secrets, sec)
			}
		}
		if u, err := url.Parse(cmd.String("stripe-api-url")); cmd.IsSet("stripe-api-url") && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			return nil, errors.New("--stripe-api-url must be an http or https URL, e.g. https://api.stripe.com")
		}
		out = append(out, stripe.New(stripe.Config{APIKey: key, WebhookSecrets: secrets, BaseURL: cmd.String("stripe-api-url")}))
	}
	cn, err := cnChannels(cmd)
	return append(out, cn...), err
}

// positiveFlags returns an error naming the first of the duration flags that was given as 0:
// in engine.Config, simulate.Config and verify.Options a zero means "the default", so a 0 on
// the command line would silently turn into the default (30 min for --payment-timeout)
// instead of what it says.
func positiveFlags(cmd *cli.Command, names ...string) error {
	for _, name := range names {
		if cmd.IsSet(name) && cmd.Duration(name) == 0 {
			return fmt.Errorf("--%s must be positive, got 0 (leave it out for the default, %s)", name, defaultOf(cmd, name))
		}
	}
	return nil
}

// defaultOf returns the default value of flag name as shown in --help.
func defaultOf(cmd *cli.Command, name string) string {
	for _, f := range cmd.Flags {
		if df, ok := f.(*cli.DurationFlag); ok && df.Name == name {
			return df.Value.String()
		}
	}
	return "its default"
}

// engineConfig is the engine.Config of serve's flags. Errors: the payment channels' flags
// (see channels).
func engineConfig(cmd *cli.Command, logger *slog.Logger) (engine.Config, error) {
	chans, err := channels(cmd)
	var simulated orderly.Gateway
	if len(chans) == 0 || cmd.Bool("enable-sim-channel") {
		simulated = sim.New() // without a real channel serve stays a working demo; see logSimulated
	}
	return engine.Config{
		Addr: cmd.String("addr"), DatabaseURL: cmd.String("database-url"), CallbackSecret: []byte(cmd.String("callback-secret")),
		AdminToken:     cmd.String("admin-token"),
		RequestTimeout: cmd.Duration("request-timeout"), PaymentTimeout: cmd.Duration("payment-timeout"), GracePeriod: cmd.Duration("grace-period"),
		SweepInterval: cmd.Duration("sweep-interval"), DeepCheckInterval: cmd.Duration("deep-check-interval"),
		InspectionHold: cmd.Duration("inspection-hold"), CloseBatchSize: cmd.Int("close-batch-size"),
		CreateBatch: cmd.Int("create-batch"), CreateQueue: cmd.Int("create-queue"),
		OutboxMaxAttempts: cmd.Int64("outbox-max-attempts"), OutboxPollInterval: cmd.Duration("outbox-poll-interval"),
		OutboxRetention: cmd.Duration("outbox-retention"), IdempotencyKeyTTL: cmd.Duration("idempotency-key-ttl"), WebhookTimeout: cmd.Duration("webhook-timeout"),
		WebhookConcurrency: cmd.Int("webhook-concurrency"), Logger: logger, ReconcileInterval: cmd.Duration("reconcile-interval"),
		InstanceID: cmd.String("instance-id"), Timer: cmd.String("timer"), RedisURL: cmd.String("redis-url"),
		NATSURL: cmd.String("nats-url"), NATSStream: cmd.String("nats-stream"), NATSSubjectPrefix: cmd.String("nats-subject-prefix"), TimerPoll: cmd.Duration("timer-poll"),
		DatabaseMaxConns: cmd.Int("database-max-conns"), DatabaseSkipMigrate: !cmd.Bool("migrate"), RedisPrefix: cmd.String("redis-prefix"),
		DatabaseLockTimeout:              cmd.Duration("database-lock-timeout"),
		DatabaseIdleInTransactionTimeout: cmd.Duration("database-idle-in-transaction-timeout"),
		Channels:                         chans, DefaultChannel: cmd.String("default-channel"), Gateway: simulated,
		ChannelCallTimeout: cmd.Duration("channel-call-timeout"),
	}, err
}

// flagOf names the serve flag of each engine.Config field that has one.
var flagOf = map[string]string{
	"Addr": "addr", "DatabaseURL": "database-url", "CallbackSecret": "callback-secret", "AdminToken": "admin-token", "InstanceID": "instance-id",
	"Timer": "timer", "RedisURL": "redis-url", "RedisPrefix": "redis-prefix", "DatabaseMaxConns": "database-max-conns", "DatabaseSkipMigrate": "migrate",
	"DatabaseLockTimeout": "database-lock-timeout", "DatabaseIdleInTransactionTimeout": "database-idle-in-transaction-timeout",
	"NATSURL": "nats-url", "NATSStream": "nats-stream", "NATSSubjectPrefix": "nats-subject-prefix", "TimerPoll": "timer-poll", "RequestTimeout": "request-timeout", "PaymentTimeout": "payment-timeout",
	"GracePeriod": "grace-period", "SweepInterval": "sweep-interval", "DeepCheckInterval": "deep-check-interval",
	"InspectionHold": "inspection-hold", "CloseBatchSize": "close-batch-size", "CreateBatch": "create-batch", "CreateQueue": "create-queue", "OutboxMaxAttempts": "outbox-max-attempts",
	"OutboxPollInterval": "outbox-poll-interval", "OutboxRetention": "outbox-retention", "IdempotencyKeyTTL": "idempotency-key-ttl", "ReconcileInterval": "reconcile-interval",
	"WebhookTimeout": "webhook-timeout", "WebhookConcurrency": "webhook-concurrency",
	"DefaultChannel": "default-channel", "Gateway": "enable-sim-channel", "ChannelCallTimeout": "channel-call-timeout", "Channels": "stripe-api-key, --alipay-app-id or --wechat-mch-id",
}

// flagError turns an *engine.ConfigError into a usage error (exit status 2) that names the
// flags ("--timer redis needs --redis-url"); other errors are returned as they are.
func flagError(err error) error {
	var ce *engine.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	return cli.Exit(ce.Describe(func(field string) string {
		if f, ok := flagOf[field]; ok {
			return "--" + f
		}
		return "engine.Config." + field
	}), exitUsage)
}

func newLogger(cmd *cli.Command, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cmd.String("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch cmd.String("log-format") {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json")
}

// newSecret returns 32 random bytes, hex-encoded.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// serveCommand is `orderly serve`; configure, when set, changes the engine's
// configuration of the flags (instanceCommand's saga faults).
func serveCommand(configure func(*cli.Command, *engine.Config) error) *cli.Command {
	cf := &configFile{}
	return &cli.Command{
		Name:  "serve",
		Usage: "run the HTTP API, the close path and the outbox relay",
		Flags: withConfigFile(cf, append(serveFlags(),
			&cli.StringFlag{Name: "cpu-profile", Usage: "write a CPU profile of the whole run to this file (pprof format; for `orderly bench`)", Sources: env("cpu-profile")})),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := cf.check(); err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			logger, err := newLogger(cmd.Root(), cmd.Root().ErrWriter)
			if err != nil {
				return err
			}
			if path := cmd.String("cpu-profile"); path != "" {
				stop, err := startCPUProfile(path)
				if err != nil {
					return err
				}
				defer stop()
			}
			cfg, err := engineConfig(cmd, logger)
			if err == nil && configure != nil {
				err = configure(cmd, &cfg)
			}
			if err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			// Without --addr (flag, variable or config file), an open API (no token, no key)
			// listens on 127.0.0.1 only (docs/operations/api-keys.md).
			cfg.LoopbackWhenOpen = !cmd.IsSet("addr")
			if err := positiveFlags(cmd, "request-timeout", "payment-timeout", "sweep-interval", "deep-check-interval",
				"inspection-hold", "timer-poll", "outbox-poll-interval", "outbox-retention", "idempotency-key-ttl", "reconcile-interval", "webhook-timeout"); err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			// The secret is printed only once the server runs: a start that fails prints
			// nothing but the error, and no secret that was never in use.
			generated := len(cfg.CallbackSecret) == 0
			if generated {
				cfg.CallbackSecret = []byte(newSecret())
			}
			if err := cfg.Validate(); err != nil {
				return flagError(err)
			}
			s, err := engine.Open(ctx, cfg, features.All()...)
			if err != nil {
				return flagError(err)
			}
			if err := s.Start(ctx); err != nil {
				return errors.Join(err, s.Close(context.WithoutCancel(ctx)))
			}
			if generated {
				fmt.Fprintf(cmd.Root().Writer, "Generated callback secret (set ORDERLY_CALLBACK_SECRET to keep it across restarts):\n  %s\n", cfg.CallbackSecret)
			}
			attrs := []any{"url", s.URL(), "database", redact.URL(cfg.DatabaseURL)}
			if cfg.RedisURL != "" {
				attrs = append(attrs, "redis", redact.URL(cfg.RedisURL))
			}
			if cfg.NATSURL != "" {
				attrs = append(attrs, "nats", redact.URL(cfg.NATSURL))
			}
			logger.Info("orderly serving", attrs...)
			logAccess(context.WithoutCancel(ctx), logger, s, cmd.IsSet("addr"))
			<-ctx.Done()
			logger.Info("shutting down")
			return s.Close(context.WithoutCancel(ctx))
		},
	}
}

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "apply pending database migrations and exit",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "database-url", Value: "orderly.db", Usage: "SQLite file path (or sqlite:PATH), postgres://… or mysql://…", Sources: env("database-url")},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			db, err := sqlstore.Open(ctx, sqlstore.Config{URL: cmd.String("database-url")})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.Root().Writer, "migrations applied to", redact.URL(cmd.String("database-url")))
			return db.Close()
		},
		Commands: []*cli.Command{{
			Name:  "status",
			Usage: "list this build's migrations, applied or pending, changing nothing; exit 1 when any is pending",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "database-url", Value: "orderly.db", Usage: "SQLite file path (or sqlite:PATH), postgres://… or mysql://…", Sources: env("database-url")},
				&cli.BoolFlag{Name: "json", Usage: "print the list as JSON"},
			},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				ms, err := sqlstore.MigrationStatus(ctx, cmd.String("database-url"))
				if err != nil {
					return err
				}
				pending := 0
				for _, m := range ms {
					if !m.Applied {
						pending++
					}
				}
				w := cmd.Root().Writer
				if cmd.Bool("json") {
					if err := writeJSON(w, ms); err != nil {
						return err
					}
				} else {
					for _, m := range ms {
						state := "pending"
						if m.Applied {
							state = "applied"
						}
						fmt.Fprintf(w, "%-8s %s\n", state, m.Name)
					}
					fmt.Fprintf(w, "%d of %d migrations applied to %s\n", len(ms)-pending, len(ms), redact.URL(cmd.String("database-url")))
				}
				if pending > 0 {
					return cli.Exit("", 1) // a finding: the schema is behind this build
				}
				return nil
			},
		}},
	}
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
