package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/engine"
)

// serveConfigOf parses a serve command line as `orderly serve` does and returns the
// engine.Config its flags make, and whether --addr counts as given, without running it.
func serveConfigOf(t *testing.T, args ...string) (engine.Config, bool) {
	t.Helper()
	app := newApp(io.Discard, io.Discard)
	var cfg engine.Config
	var addrGiven bool
	for _, c := range app.Commands {
		if c.Name == "serve" {
			c.Action = func(_ context.Context, cmd *cli.Command) error {
				var err error
				cfg, err = engineConfig(cmd, nil)
				addrGiven = cmd.IsSet("addr")
				return err
			}
		}
	}
	if err := app.Run(t.Context(), append([]string{"orderly", "serve"}, args...)); err != nil {
		t.Fatalf("serve %v: %v", args, err)
	}
	return cfg, addrGiven
}

// TestConfigFile: values of a TOML or YAML --config file reach serve's engine.Config; an
// ORDERLY_* variable overrides the file and a flag overrides both (flag > env > file).
// Not parallel: it sets environment variables.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"orderly.toml": "addr = \"127.0.0.1:9999\"\nsweep-interval = \"3s\"\nclose-batch-size = 7\nadmin-token = \"file-token\"\noutbox-max-attempts = 4\n",
		"orderly.yaml": "addr: 127.0.0.1:9999\nsweep-interval: 3s\nclose-batch-size: 7\nadmin-token: file-token\noutbox-max-attempts: 4\n",
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, addrGiven := serveConfigOf(t, "--config", path)
		if cfg.Addr != "127.0.0.1:9999" || !addrGiven || cfg.SweepInterval != 3*time.Second || cfg.CloseBatchSize != 7 ||
			cfg.AdminToken != "file-token" || cfg.OutboxMaxAttempts != 4 || cfg.DeepCheckInterval != engine.DefaultDeepCheckInterval {
			t.Errorf("%s: config %+v (addr given %v), want the file's values and the defaults", name, cfg, addrGiven)
		}
		cfg, _ = serveConfigOf(t, "--config", path, "--sweep-interval", "4s", "--admin-token", "flag-token")
		if cfg.SweepInterval != 4*time.Second || cfg.AdminToken != "flag-token" || cfg.CloseBatchSize != 7 {
			t.Errorf("%s with flags: sweep %v, token %q, batch %d; want the flags' 4s and flag-token, the file's 7", name,
				cfg.SweepInterval, cfg.AdminToken, cfg.CloseBatchSize)
		}
	}

	t.Setenv("ORDERLY_CONFIG", filepath.Join(dir, "orderly.toml"))
	t.Setenv("ORDERLY_SWEEP_INTERVAL", "5s")
	cfg, _ := serveConfigOf(t)
	if cfg.SweepInterval != 5*time.Second || cfg.CloseBatchSize != 7 {
		t.Errorf("ORDERLY_CONFIG and ORDERLY_SWEEP_INTERVAL: sweep %v, batch %d; want the variable's 5s, the file's 7", cfg.SweepInterval, cfg.CloseBatchSize)
	}
	cfg, _ = serveConfigOf(t, "--sweep-interval", "6s")
	if cfg.SweepInterval != 6*time.Second {
		t.Errorf("flag with variable and file: sweep %v, want the flag's 6s", cfg.SweepInterval)
	}
}

// TestConfigFileRefused: a file that cannot be used stops serve before it opens anything,
// with a message naming the file and the key: exit status 2, or 1 for a value that does
// not parse (cli's own error, as for an ORDERLY_* variable).
func TestConfigFileRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, c := range map[string]struct{ text, msg string }{
		"typo.toml":   {"addr-typo = \":8080\"\n", `"addr-typo" is not a flag of this command`},
		"table.yaml":  {"addr:\n  host: x\n", "addr: a map[string]interface {} is no flag value"},
		"broken.toml": {"addr = \n", "typo"},
		"orderly.ini": {"addr=:8080\n", "must end in .toml, .yaml or .yml"},
		"bad.yaml":    {"sweep-interval: soon\n", `could not parse "soon"`},
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		msg := c.msg
		if name == "broken.toml" {
			msg = path
		}
		db := filepath.Join(dir, name+".db")
		code, stdout, stderr := runCLI(t, "serve", "--config", path, "--database-url", db, "--addr", "127.0.0.1:0")
		want := 2
		if name == "bad.yaml" {
			want = 1 // cli's own error for a value that does not parse, as for an ORDERLY_* variable
		}
		if code != want || !strings.Contains(stderr, msg) || stdout != "" {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, stderr, want, msg)
		}
		if _, err := os.Stat(db); err == nil {
			t.Errorf("%s: serve created its database before refusing the file", name)
		}
	}
	code, _, stderr := runCLI(t, "serve", "--config", filepath.Join(dir, "missing.toml"), "--addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing file: exit %d, %s", code, stderr)
	}
}

// TestConfigListValues: a list in the file is the comma-separated value of a flag that
// takes several.
func TestConfigListValues(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("wechat-platform-key: [\"A=a.pem\", \"B=b.pem\"]\nclose-batch-size: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readConfig(path, []string{"wechat-platform-key", "close-batch-size"})
	if err != nil || got["wechat-platform-key"] != "A=a.pem,B=b.pem" || got["close-batch-size"] != "3" {
		t.Errorf("readConfig = %v, %v", got, err)
	}
}
