package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// readBody reads r's whole body, at most s.maxBody bytes. Over the limit it answers 413 and
// returns ok=false; the body is then left unread.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	if r.ContentLength > s.maxBody {
		s.writeProblem(w, r, CodePayloadTooLarge, fmt.Sprintf("request body is larger than %d bytes", s.maxBody))
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			s.writeProblem(w, r, CodePayloadTooLarge, fmt.Sprintf("request body is larger than %d bytes", s.maxBody))
			return nil, false
		}
		s.writeError(w, r, invalidf("cannot read request body"))
		return nil, false
	}
	return body, true
}

// isJSONType reports whether a Content-Type header names JSON: application/json or any
// application/…+json type, with any parameters.
func isJSONType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// bodyRule says whether a request body may be empty.
type bodyRule int

const (
	bodyRequired bodyRule = iota // an empty body is 422
	bodyOptional                 // an empty body leaves the target as it is
)

// unknownRule says what a body's members that the target has no field for mean.
type unknownRule int

const (
	rejectUnknown unknownRule = iota // 422 naming the member: order, payment start, catalog and admin bodies, to catch typos
	ignoreUnknown                    // skipped: gateway callbacks, whose providers add fields over time
)

// decode reads r's body and decodes it into v, rejecting unknown members (see decodeJSON).
// On failure it answers 413, 415 or 422 and returns false.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any, rule bodyRule) bool {
	body, ok := s.readBody(w, r)
	if !ok {
		return false
	}
	return s.decodeBody(w, r, body, v, rule, rejectUnknown)
}

// decodeBody checks the Content-Type of a non-empty body and decodes it into v.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, body []byte, v any, rule bodyRule, unknown unknownRule) bool {
	if len(bytes.TrimSpace(body)) == 0 {
		if rule == bodyOptional {
			return true
		}
		s.writeError(w, r, invalidf("request body is required"))
		return false
	}
	if ct := r.Header.Get("Content-Type"); !isJSONType(ct) {
		if ct == "" {
			ct = "none"
		}
		s.writeProblem(w, r, CodeUnsupportedMediaType,
			fmt.Sprintf("request body must be application/json, got Content-Type %s", ct))
		return false
	}
	if err := decodeJSON(body, v, unknown); err != nil {
		s.writeError(w, r, err)
		return false
	}
	return true
}

// decodeJSON decodes one JSON value from data into v with the semantics of JSON v2
// (github.com/go-json-experiment/json, the proposed encoding/json/v2):
//   - a member name that occurs twice in one object, at any depth and also inside members
//     that are ignored, is refused: a signed body must not mean two things (RFC 8259 §4
//     leaves duplicates to the parser; last-wins parsers disagree with first-wins ones);
//   - names match the field tags exactly: "AMOUNT" is not "amount";
//   - unknown members are refused or skipped as unknown says;
//   - invalid UTF-8, values of the wrong type, numbers that do not fit and data after the
//     value are refused.
//
// Errors are EINVALID with a message naming the offending field as a path
// ("items[0].quantity") where there is one.
func decodeJSON(data []byte, v any, unknown unknownRule) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	if err := jsonv2.UnmarshalDecode(dec, v, jsonv2.RejectUnknownMembers(unknown == rejectUnknown)); err != nil {
		return decodeError(err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return invalidf("request body must hold a single JSON object, found data after it")
	}
	return nil
}

// decodeError translates a JSON v2 error into an EINVALID error.
func decodeError(err error) error {
	if e, ok := errors.AsType[*jsontext.SyntacticError](err); ok {
		switch {
		case errors.Is(e.Err, jsontext.ErrDuplicateName):
			return invalidf("duplicate field %q: a member name may occur once per object", fieldPath(e.JSONPointer))
		case errors.Is(e.Err, io.ErrUnexpectedEOF):
			return invalidf("request body is not valid JSON: unexpected end of input")
		}
		msg := "request body is not valid JSON: " + e.Err.Error()
		if f := fieldPath(e.JSONPointer); f != "" {
			msg += " in " + f
		}
		return invalidf("%s (at byte %d)", msg, e.ByteOffset)
	}
	if e, ok := errors.AsType[*jsonv2.SemanticError](err); ok {
		field := fieldPath(e.JSONPointer)
		switch {
		case errors.Is(e.Err, jsonv2.ErrUnknownName):
			return invalidf("unknown field %q", field)
		case field == "":
			return invalidf("request body must be a JSON object, got %s", e.JSONKind)
		case e.GoType == nil:
			return invalidf("%s: is invalid", field)
		}
		got := kindName(e.JSONKind)
		if isTime(e.GoType) && e.JSONKind == '"' {
			return invalidf("%s: must be an RFC 3339 time such as \"2026-12-01T10:00:00Z\"", field)
		}
		if e.JSONKind == '0' && len(e.JSONValue) > 0 {
			if isIntegerLiteral(e.JSONValue) && isIntKind(e.GoType) {
				return invalidf("%s: integer %s is out of range", field, e.JSONValue)
			}
			got += " " + string(e.JSONValue)
		}
		return invalidf("%s: must be %s, got %s", field, jsonKind(e.GoType), got)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return invalidf("request body is not valid JSON: unexpected end of input")
	}
	return invalidf("request body is invalid: %s", err)
}

// fieldPath writes a JSON Pointer (RFC 6901) as a field path for messages:
// "/items/0/quantity" → "items[0].quantity"; "" for the whole body.
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// isIntegerLiteral reports whether a JSON number is written as an integer (no fraction or
// exponent), so that a failure to decode it into an integer type means it is out of range.
func isIntegerLiteral(v jsontext.Value) bool {
	return !bytes.ContainsAny(v, ".eE")
}

// isIntKind reports whether t (or what it points to) is an integer type.
func isIntKind(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// kindName names a JSON kind for messages: string, number, object, array, boolean, null.
func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return k.String()
}

// isTime reports whether t (or what it points to) is a time, which JSON holds as an RFC 3339
// string.
func isTime(t reflect.Type) bool {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t == reflect.TypeFor[Time]() || t == reflect.TypeFor[time.Time]()
}

// jsonKind names the JSON type that decodes into t, for error messages.
func jsonKind(t reflect.Type) string {
	if isTime(t) {
		return "an RFC 3339 time (a string)"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "a value of type " + t.String()
	}
}

// writeJSON answers with status and v as JSON. An encoding error is answered as an
// internal error instead.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("encode %T response: %w", v, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
