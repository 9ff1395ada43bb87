package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v3"
	"go.yaml.in/yaml/v4"
)

// configFile is the file of --config (ORDERLY_CONFIG): TOML (.toml) or YAML (.yaml,
// .yml), one top-level key per flag of the command, named like the flag without its dashes
// ("addr", "database-url", "sweep-interval"), each a string, number, boolean or list (for
// flags that take several values). It is read once, when a flag first asks for it, and
// each flag has it last in its value source chain, so precedence is flag > ORDERLY_*
// variable > file > default (cli's own value sources; docs/operations/configuration.md).
type configFile struct {
	path  string // set by --config while the command line is parsed
	flags []string

	once   sync.Once
	values map[string]string
	err    error
}

// configFlag is the --config flag that fills cf.path. It comes before the flags that read
// the file, so that a path from ORDERLY_CONFIG is known when they do.
func configFlag(cf *configFile) cli.Flag {
	return &cli.StringFlag{Name: "config", Usage: "TOML (.toml) or YAML (.yaml) file of flag values, e.g. addr = \":8080\"; flags and ORDERLY_* variables override it",
		Sources: env("config"), Destination: &cf.path}
}

// withConfigFile appends cf as the last value source of each flag and returns the flags
// with --config first. It panics on a flag type it does not know: a programming error that
// every test building the command (TestConfigFile) catches.
func withConfigFile(cf *configFile, flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		name := f.Names()[0]
		cf.flags = append(cf.flags, name)
		src := &configSource{file: cf, key: name}
		switch f := f.(type) {
		case *cli.StringFlag:
			f.Sources.Chain = append(f.Sources.Chain, src)
		case *cli.IntFlag:
			f.Sources.Chain = append(f.Sources.Chain, src)
		case *cli.Int64Flag:
			f.Sources.Chain = append(f.Sources.Chain, src)
		case *cli.DurationFlag:
			f.Sources.Chain = append(f.Sources.Chain, src)
		case *cli.FloatFlag:
			f.Sources.Chain = append(f.Sources.Chain, src)
		case *cli.UintFlag:
			f.Sources.Chain = append(f.Sources.Chain, src)
		case *cli.BoolFlag:
			f.Sources.Chain = append(f.Sources.Chain, src)
		case *cli.StringSliceFlag:
			f.Sources.Chain = append(f.Sources.Chain, src)
		default:
			panic(fmt.Sprintf("orderly: --config cannot set flag %s of type %T", name, f))
		}
	}
	return append([]cli.Flag{configFlag(cf)}, flags...)
}

// check reads the file (when --config names one) and returns its error: a file that
// cannot be read or parsed, a key that is no flag, a value that is a table.
func (cf *configFile) check() error {
	if cf.path == "" {
		return nil
	}
	cf.load()
	return cf.err
}

// load reads and flattens the file once.
func (cf *configFile) load() {
	cf.once.Do(func() {
		cf.values, cf.err = readConfig(cf.path, cf.flags)
	})
}

// readConfig reads path as TOML or YAML by its extension and returns each key's value as
// the text a flag parses; lists are comma-joined. Errors name the file.
func readConfig(path string, flags []string) (map[string]string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator names the file on the command line
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	raw := map[string]any{}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".toml":
		err = toml.Unmarshal(b, &raw)
	case ".yaml", ".yml":
		err = yaml.Unmarshal(b, &raw)
	default:
		return nil, fmt.Errorf("--config %s: the file must end in .toml, .yaml or .yml", path)
	}
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	out := make(map[string]string, len(raw))
	var errs []error
	for key, v := range raw {
		if !slices.Contains(flags, key) {
			errs = append(errs, fmt.Errorf("--config %s: %q is not a flag of this command", path, key))
			continue
		}
		s, err := flagText(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--config %s: %s: %w", path, key, err))
			continue
		}
		out[key] = s
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// flagText is the flag text of a decoded TOML or YAML value.
func flagText(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(v), nil
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := flagText(e)
			if err != nil {
				return "", err
			}
			if _, ok := e.([]any); ok {
				return "", errors.New("a list of lists is no flag value")
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("a %T is no flag value (use a string, number, boolean or list)", v)
}

// configSource is one flag's value in the config file: a cli.ValueSource.
type configSource struct {
	file *configFile
	key  string
}

// Lookup implements cli.ValueSource. A file that does not read or parse has no values
// here; its error is returned by configFile.check, which the command calls first.
func (s *configSource) Lookup() (string, bool) {
	if s.file.path == "" {
		return "", false
	}
	s.file.load()
	v, ok := s.file.values[s.key]
	return v, ok
}

// String implements fmt.Stringer (shown in errors: "… from key addr in file orderly.toml").
func (s *configSource) String() string {
	return fmt.Sprintf("key %s in file %s", s.key, s.file.path)
}

// GoString implements fmt.GoStringer.
func (s *configSource) GoString() string {
	return fmt.Sprintf("&configSource{key:%q,path:%q}", s.key, s.file.path)
}
