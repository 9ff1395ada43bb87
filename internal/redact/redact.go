// Package redact removes credentials from connection strings before they are logged,
// printed or put into an error: database, Redis and NATS URLs, libpq key=value strings and
// go-sql-driver/mysql DSNs. What identifies the server (scheme, user name, host, port,
// database, harmless parameters) stays readable.
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces every credential.
const Mask = "xxxxx"

// URL returns s with its credentials replaced by Mask:
//   - a URL's password (postgres://user:secret@host/db → postgres://user:xxxxx@host/db),
//     and for NATS (nats://, tls://, ws://, wss://) a user name given alone, which is a
//     token; a comma-separated list of NATS servers is redacted member by member;
//   - the values of query parameters whose name holds "pass", "pwd", "secret", "token",
//     "apikey" or "api_key" (?password=…, ?sslpassword=…);
//   - password=… in a libpq key=value string ("host=db password=secret");
//   - the password of a go-sql-driver/mysql DSN (user:secret@tcp(host:3306)/db).
//
// A URL that does not parse (a password with an unescaped '#', '/' or '?') loses all of
// its user information. Strings without credentials come back unchanged.
func URL(s string) string {
	scheme, _, hasScheme := strings.Cut(s, "://")
	switch {
	case hasScheme && natsScheme(scheme) && strings.Contains(s, ","):
		parts := strings.Split(s, ",")
		for i, p := range parts {
			if !strings.Contains(p, "://") {
				p = scheme + "://" + p
				parts[i] = strings.TrimPrefix(URL(p), scheme+"://")
				continue
			}
			parts[i] = URL(p)
		}
		return strings.Join(parts, ",")
	case hasScheme:
		return redactURL(s, scheme)
	case keyValuePassword.MatchString(s):
		return keyValuePassword.ReplaceAllString(s, "${1}"+Mask)
	}
	return redactMySQLDSN(s)
}

func natsScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "nats", "tls", "ws", "wss":
		return true
	}
	return false
}

// redactURL redacts a string of the form scheme://….
func redactURL(s, scheme string) string {
	u, err := url.Parse(s)
	if err != nil {
		return redactAuthority(s, scheme)
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
			changed = true
		} else if natsScheme(scheme) && u.User.Username() != "" {
			u.User = url.User(Mask)
			changed = true
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for name, values := range q {
			if secretName(name) {
				for i := range values {
					values[i] = Mask
				}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if !changed {
		return s
	}
	return u.String()
}

// redactAuthority drops the user information of a URL that does not parse: everything
// between "://" and the last '@' before the path.
func redactAuthority(s, scheme string) string {
	rest := s[len(scheme)+3:]
	end := len(rest)
	if i := strings.IndexAny(rest, "/?"); i >= 0 && !strings.Contains(rest[i:], "@") {
		end = i
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return s
	}
	return scheme + "://" + Mask + rest[at:]
}

// secretName reports whether a query parameter's name says it holds a credential.
func secretName(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"pass", "pwd", "secret", "token", "apikey", "api_key"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// keyValuePassword matches password=… in a libpq key=value string, quoted or not.
var keyValuePassword = regexp.MustCompile(`(?i)(\b(?:password|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactMySQLDSN redacts user:password@protocol(address)/db: the password is what follows
// the first ':' of the user information, which ends at the last '@' before the last '/'.
func redactMySQLDSN(s string) string {
	slash := strings.LastIndex(s, "/")
	if slash < 0 {
		return s
	}
	at := strings.LastIndex(s[:slash], "@")
	if at < 0 {
		return s
	}
	user, _, hasPassword := strings.Cut(s[:at], ":")
	if !hasPassword || strings.Contains(user, "/") {
		return s
	}
	return user + ":" + Mask + s[at:]
}

// Error returns err with every credential of the connection string s (as URL finds them,
// raw and URL-decoded) replaced by Mask in its text, for errors of drivers that quote the
// string they were given (a *url.Error does). errors.Is and errors.As see err's chain.
// It returns err itself when its text holds none of them, and nil for nil.
func Error(err error, s string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	redacted := msg
	for _, secret := range secrets(s) {
		redacted = strings.ReplaceAll(redacted, secret, Mask)
	}
	if redacted == msg {
		return err
	}
	return &redactedError{msg: redacted, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// secrets returns the credentials of s that URL masks, longest first, each also
// URL-decoded; none shorter than 3 bytes (masking "a" everywhere would garble the text and
// protects nothing).
func secrets(s string) []string {
	var out []string
	add := func(v string) {
		for _, w := range []string{v, unescape(v)} {
			if len(w) >= 3 && !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
	}
	if i := strings.Index(s, "://"); i >= 0 {
		for _, part := range strings.Split(s[i+3:], ",") {
			part = strings.TrimPrefix(part, s[:i]+"://")
			end := len(part)
			if j := strings.IndexAny(part, "/?"); j >= 0 && !strings.Contains(part[j:], "@") {
				end = j
			}
			if at := strings.LastIndex(part[:end], "@"); at >= 0 {
				user, password, ok := strings.Cut(part[:at], ":")
				if ok {
					add(password)
				} else if natsScheme(s[:i]) {
					add(user)
				}
			}
		}
		if _, query, ok := strings.Cut(s, "?"); ok {
			for _, kv := range strings.Split(query, "&") {
				if name, value, ok := strings.Cut(kv, "="); ok && secretName(name) {
					add(value)
				}
			}
		}
	} else if m := keyValuePassword.FindAllStringSubmatch(s, -1); m != nil {
		for _, g := range m {
			add(strings.Trim(g[2], "'"))
		}
	} else if red := redactMySQLDSN(s); red != s {
		user, _, _ := strings.Cut(s, ":")
		at := strings.LastIndex(s[:strings.LastIndex(s, "/")], "@")
		add(s[len(user)+1 : at])
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

func unescape(v string) string {
	if u, err := url.QueryUnescape(v); err == nil {
		return u
	}
	return v
}
