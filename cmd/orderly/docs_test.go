package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/internal/testenv"
)

// docFiles are the user documentation whose orderly command lines TestDocsCommandLines checks.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md", "../../BENCHMARKS.md"}
	err := filepath.WalkDir("../../docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") && !strings.HasSuffix(path, "benchmarks-history.md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	inlineRE = regexp.MustCompile("`([^`\n]+)`")
	// orderlyRE finds an invocation of the binary (orderly, ./orderly, go run ./cmd/orderly)
	// where a shell starts a command: at the start, after an operator or "$(", after
	// variable assignments.
	orderlyRE = regexp.MustCompile(`(?:^|&&|\|\||;|\||\$\()\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:go run \./cmd/orderly|\./orderly|orderly)\s+(.*)`)
	// configFlagRE finds the first column of a configuration table row that names flags.
	configFlagRE = regexp.MustCompile("^\\| ([^|]*`--[^|]*)\\|")
	// flagRE is a flag name; a placeholder such as --wechat-… is none.
	flagRE = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*[a-z0-9])(?:[^a-z0-9…-]|$)`)
)

// docCommand is one orderly command line found in the docs, with where it was found.
type docCommand struct {
	where string
	args  []string // after "orderly"
}

// docCommands extracts the orderly command lines of a Markdown text: those in fenced shell
// blocks (continuation lines joined) and those in inline code, which may leave out
// "orderly" when they start with a subcommand ("`simulate --flow wallet`").
func docCommands(file, text string, subcommands []string) []docCommand {
	var lines []string
	inFence, shell, cont := false, false, ""
	for _, line := range strings.Split(text, "\n") {
		if fence, ok := strings.CutPrefix(strings.TrimSpace(line), "```"); ok {
			inFence, shell = !inFence, !inFence && slices.Contains([]string{"sh", "bash", "console"}, fence)
			continue
		}
		if inFence {
			if shell {
				if joined, ok := strings.CutSuffix(line, "\\"); ok {
					cont += joined + " "
					continue
				}
				lines = append(lines, cont+line)
				cont = ""
			}
			continue
		}
		for _, m := range inlineRE.FindAllStringSubmatch(line, -1) {
			span := m[1]
			if first, _, _ := strings.Cut(span, " "); slices.Contains(subcommands, first) && strings.Contains(span, "--") {
				span = "orderly " + span
			}
			lines = append(lines, span)
		}
	}
	var cmds []docCommand
	for _, line := range lines {
		line, _, _ = strings.Cut(line, " #") // a comment
		for _, m := range orderlyRE.FindAllStringSubmatch(strings.TrimSpace(line), -1) {
			rest := m[1]
			// The command ends at a shell operator or a redirection.
			if i := strings.IndexAny(rest, ";|&)<>"); i >= 0 {
				rest = rest[:i]
			}
			cmds = append(cmds, docCommand{where: file + ": " + strings.TrimSpace(line), args: strings.Fields(rest)})
		}
	}
	return cmds
}

// hasFlag reports whether cmd or one of its ancestors (the global flags) takes --name.
func hasFlag(path []*cli.Command, name string) bool {
	if name == "help" || name == "h" || name == "version" {
		return true
	}
	for _, c := range path {
		for _, f := range c.Flags {
			if slices.Contains(f.Names(), name) {
				return true
			}
		}
	}
	return false
}

// checkCommand resolves args against the CLI (subcommands while the words name them) and
// returns the flags that the resolved command does not take.
func checkCommand(app *cli.Command, args []string) (path []*cli.Command, unknown []string) {
	path = []*cli.Command{app}
	descending := true
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			if m := flagRE.FindStringSubmatch(a); m != nil && !hasFlag(path, m[1]) {
				unknown = append(unknown, "--"+m[1])
			}
			continue
		}
		if descending {
			if sub := path[len(path)-1].Command(a); sub != nil {
				path = append(path, sub)
				continue
			}
			// A flag's value or a positional argument: flags may follow, subcommands may not.
			if len(path) > 1 {
				descending = false
			}
		}
	}
	return path, unknown
}

// TestDocsCommandLines: every `orderly <command> --flag` in README.md, BENCHMARKS.md and
// docs/ names a command and flags that the CLI has, so that a renamed or removed flag
// fails here rather than in a reader's terminal; and every flag in the first column of
// the configuration table is a flag of serve (or a global one).
func TestDocsCommandLines(t *testing.T) {
	t.Parallel()
	app := newApp(io.Discard, io.Discard)
	var subcommands []string
	for _, c := range app.Commands {
		subcommands = append(subcommands, c.Name)
	}
	checked, flags := 0, 0
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range docCommands(file, string(text), subcommands) {
			path, unknown := checkCommand(app, c.args)
			if len(path) == 1 && len(c.args) > 0 && !strings.HasPrefix(c.args[0], "-") {
				t.Errorf("%s: %q is no orderly command", c.where, c.args[0])
				continue
			}
			for _, f := range unknown {
				t.Errorf("%s: %s has no flag %s", c.where, commandName(path), f)
			}
			checked++
			flags += strings.Count(strings.Join(c.args, " "), "--")
		}
	}
	t.Logf("checked %d command lines with %d flags", checked, flags)
	// The docs hold dozens of command lines: finding few means the extraction broke.
	if checked < 40 || flags < 60 {
		t.Errorf("checked %d command lines with %d flags; the docs hold more", checked, flags)
	}

	serve := app.Command("serve")
	text, err := os.ReadFile("../../docs/operations/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(string(text), "\n") {
		m := configFlagRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		for _, f := range flagRE.FindAllStringSubmatch(m[1], -1) {
			if !hasFlag([]*cli.Command{app, serve}, f[1]) {
				t.Errorf("configuration.md: serve has no flag --%s", f[1])
			}
		}
	}
	if rows < 30 {
		t.Errorf("configuration.md: %d flag rows; the table has more", rows)
	}
}

// TestCheckCommand: the checker itself finds an unknown flag and a subcommand's flags.
func TestCheckCommand(t *testing.T) {
	t.Parallel()
	app := newApp(io.Discard, io.Discard)
	for _, tc := range []struct {
		args    []string
		command string
		unknown []string
	}{
		{[]string{"serve", "--addr", ":8080", "--database-url", "x.db"}, "orderly serve", nil},
		{[]string{"serve", "--no-such-flag"}, "orderly serve", []string{"--no-such-flag"}},
		{[]string{"keys", "create", "--name", "ops", "--scope", "admin"}, "orderly keys create", nil},
		{[]string{"--log-level", "debug", "simulate", "--orders=10", "--json"}, "orderly simulate", nil},
		{[]string{"keys", "create", "--orders", "1"}, "orderly keys create", []string{"--orders"}},
	} {
		path, unknown := checkCommand(app, tc.args)
		if got := commandName(path); got != tc.command || !slices.Equal(unknown, tc.unknown) {
			t.Errorf("checkCommand(%q) = %s, %q; want %s, %q", tc.args, got, unknown, tc.command, tc.unknown)
		}
	}
	cmds := docCommands("x.md", "```sh\n./orderly serve --addr :1 \\\n  --timer redis &  # comment --nope\n```\nsee `simulate --flow wallet`.",
		[]string{"serve", "simulate"})
	if len(cmds) != 2 || !slices.Equal(cmds[0].args, []string{"serve", "--addr", ":1", "--timer", "redis"}) ||
		!slices.Equal(cmds[1].args, []string{"simulate", "--flow", "wallet"}) {
		t.Errorf("docCommands = %+v", cmds)
	}
}

// commandName is the command line that names the last command of path, "orderly keys create".
func commandName(path []*cli.Command) string {
	names := make([]string, len(path))
	for i, c := range path {
		names[i] = c.Name
	}
	return strings.Join(names, " ")
}

// tourScript is the shell of the ```sh blocks of file between the headings from and to,
// without the lines that build, start and stop the server or set its address and secret:
// the test runs one in process instead.
func tourScript(t *testing.T, file, from, to string) string {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n"+from+"\n")
	if !ok {
		t.Fatalf("%s: no heading %q", file, from)
	}
	section, _, _ = strings.Cut(section, "\n"+to)
	var script strings.Builder
	inShell := false
	for _, line := range strings.Split(section, "\n") {
		if fence, ok := strings.CutPrefix(line, "```"); ok {
			inShell = !inShell && fence == "sh"
			continue
		}
		if !inShell || strings.HasPrefix(line, "go ") || strings.HasPrefix(line, "./orderly serve") ||
			strings.HasPrefix(line, "kill ") || strings.HasPrefix(line, "export ORDERLY_CALLBACK_SECRET=") ||
			strings.HasPrefix(line, "BASE=") {
			continue
		}
		script.WriteString(line + "\n")
	}
	return script.String()
}

// TestDocsTours runs the curl tours of README.md and docs/getting-started.md against an
// in-process server, as a reader would paste them, and checks the outcomes they announce.
// It needs bash, curl, jq and openssl, as the tours do.
func TestDocsTours(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the tours need %s: %v", tool, err)
		}
	}
	for _, tc := range []struct {
		file, from, to string
		want           []string
	}{
		{"../../README.md", "## A 5-minute tour", "## Documentation", []string{
			`{"received":true,"applied":true`, `"state": "paid"`, `"sold":2`, `"state": "closed"`,
			`"close_reason": "payment_timeout"`}},
		{"../../docs/getting-started.md", "## Walk-through with curl", "## Watch it under traffic", []string{
			`"applied":true`, `"applied":false`, `"pay_status": "partially_refunded"`, `"refunded_amount": 1500`,
			`"sold":1`, `refund-exceeds-captured`, `"close_reason": "payment_timeout"`, `"status": 409`}},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			t.Parallel()
			base, _ := serveFor(t)
			script := "set -eu -o pipefail\nBASE=" + base + "\nORDERLY_CALLBACK_SECRET=cb\n" +
				tourScript(t, tc.file, tc.from, tc.to)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, "bash", "-c", script).CombinedOutput()
			if err != nil {
				t.Fatalf("the tour failed: %v\n--- script\n%s--- output\n%s", err, script, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the tour's output has no %s:\n%s", w, out)
				}
			}
		})
	}
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// slug is GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes.
func slug(heading string) string {
	return strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), ""), " ", "-")
}

// TestDocsLinks: every relative link of README.md, BENCHMARKS.md and docs/ (history
// included) names a file that exists and, for a Markdown file, a heading it has.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	files := append(docFiles(t), "../../docs/benchmarks-history.md")
	anchors := func(file string) []string {
		text, err := os.ReadFile(file)
		if err != nil {
			return nil
		}
		var out []string
		for _, m := range headingRE.FindAllStringSubmatch(string(text), -1) {
			out = append(out, slug(m[1]))
		}
		return out
	}
	links := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s: link %s: %v", file, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") && !slices.Contains(anchors(resolved), anchor) {
				t.Errorf("%s: link %s: %s has no heading #%s", file, target, resolved, anchor)
			}
		}
	}
	if links < 50 {
		t.Errorf("found %d relative links; the docs hold more", links)
	}
}
