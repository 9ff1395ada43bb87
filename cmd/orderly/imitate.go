package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"
)

// imitations are the providers `orderly imitate` serves, by name: each runs an imitation of
// the provider's API on addr until ctx is done, sends its signed notifications to orderly
// at orderlyURL, and first prints the `orderly serve` flags that point at it and the
// buyer's client step.
var imitations = map[string]func(ctx context.Context, w io.Writer, addr, orderlyURL string) error{
	"stripe": imitateStripe,
	"alipay": imitateAlipay,
	"wechat": imitateWeChat,
}

// imitateCommand is `orderly imitate PROVIDER`: a local imitation of a payment provider,
// so that a new user can see a real channel's handoff and complete a payment without an
// account at the provider. It is a test tool: it moves no money.
func imitateCommand() *cli.Command {
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range imitations {
			if !yield(n) {
				return
			}
		}
	})
	return &cli.Command{
		Name:      "imitate",
		Usage:     "serve a local imitation of a payment provider (" + strings.Join(names, ", ") + ") for trying a real channel; moves no money",
		ArgsUsage: "PROVIDER",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: "127.0.0.1:12111", Usage: "where the imitation listens (loopback only)"},
			&cli.StringFlag{Name: "orderly-url", Value: "http://127.0.0.1:8080", Usage: "the orderly server its notifications go to"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			name := cmd.Args().First()
			run, ok := imitations[name]
			if cmd.Args().Len() != 1 || !ok {
				return cli.Exit(fmt.Sprintf("imitate takes one provider: %s", strings.Join(names, ", ")), exitUsage)
			}
			// An imitation accepts any test key: it must never be reachable from another host.
			if host, _, err := net.SplitHostPort(cmd.String("addr")); err != nil || !loopback(host) {
				return cli.Exit(fmt.Sprintf("--addr %q: the imitation listens on the loopback only (127.0.0.1:PORT)", cmd.String("addr")), exitUsage)
			}
			return run(ctx, cmd.Root().Writer, cmd.String("addr"), strings.TrimRight(cmd.String("orderly-url"), "/"))
		},
	}
}

// loopback reports whether host is a loopback address or "localhost".
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// writeFiles writes each file of files (name → content) into dir, readable by the owner
// only (the imitations' test keys), and returns their paths by name.
func writeFiles(dir string, files map[string][]byte) (map[string]string, error) {
	paths := make(map[string]string, len(files))
	for name, b := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, err
		}
		paths[name] = path
	}
	return paths, nil
}
