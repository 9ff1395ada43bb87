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
	"strings"
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

// decode reads r's body and decodes it strictly into v (see decodeStrict). On failure it
// answers 413, 415 or 422 and returns false.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any, rule bodyRule) bool {
	body, ok := s.readBody(w, r)
	if !ok {
		return false
	}
	return s.decodeBody(w, r, body, v, rule)
}

// decodeBody checks the Content-Type of a non-empty body and decodes it strictly into v.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, body []byte, v any, rule bodyRule) bool {
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
	if err := decodeStrict(body, v); err != nil {
		s.writeError(w, r, err)
		return false
	}
	return true
}

// decodeStrict decodes one JSON object from data into v, rejecting unknown fields, values
// of the wrong type and trailing data. Errors are EINVALID with a message that names the
// offending field where there is one.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		return invalidf("request body must hold a single JSON object, found data after it")
	}
	return nil
}

// decodeError translates an encoding/json error into an EINVALID error.
func decodeError(err error) error {
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return invalidf("request body is not valid JSON: %s (at byte %d)", e.Error(), e.Offset)
	}
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if e.Field == "" {
			return invalidf("request body must be a JSON object, got %s", e.Value)
		}
		return invalidf("%s: must be %s, got %s", e.Field, jsonKind(e.Type), e.Value)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return invalidf("request body is not valid JSON: unexpected end of input")
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return invalidf("unknown field %s", msg)
	}
	return invalidf("request body is invalid: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON type that decodes into t, for error messages.
func jsonKind(t reflect.Type) string {
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
