package httpapi

import (
	"fmt"
	"time"
)

// TimeLayout is the layout of every time in a response body: RFC 3339 in UTC with exactly
// three fractional digits (docs/api.md), e.g. "2026-11-30T07:33:07.123Z". Sub-millisecond
// digits are truncated, never rounded, so a time is never shown later than it is.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// Time is a time.Time that marshals to JSON in TimeLayout. Response bodies use it instead
// of time.Time, whose encoding has a variable number of fractional digits.
type Time time.Time

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) {
	u := time.Time(t).UTC()
	if y := u.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("time %v: year outside [0,9999]", u)
	}
	b := make([]byte, 0, len(TimeLayout)+2)
	b = append(b, '"')
	b = u.AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler; it accepts any RFC 3339 time, so that clients
// in Go can decode responses into types that use Time.
func (t *Time) UnmarshalJSON(data []byte) error {
	var v time.Time
	if err := v.UnmarshalJSON(data); err != nil {
		return err
	}
	*t = Time(v)
	return nil
}

// String returns the time in TimeLayout.
func (t Time) String() string { return time.Time(t).UTC().Format(TimeLayout) }

// timePtr converts an optional time; nil stays nil (and is omitted with omitempty).
func timePtr(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	v := Time(*t)
	return &v
}

// parseTime parses an RFC 3339 time from a request field, naming the field on error.
func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalidf("%s: must be an RFC 3339 time such as 2026-11-30T07:33:07.123Z", field)
	}
	return t.UTC(), nil
}
