package httpapi

import (
	"encoding/json"
	"testing"
	"time"
)

func TestTimeMarshalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   time.Time
		want string
	}{
		{"nanoseconds are truncated, not rounded", time.Date(2026, 11, 30, 7, 33, 7, 123999999, time.UTC), `"2026-11-30T07:33:07.123Z"`},
		{"whole seconds keep three digits", time.Date(2026, 11, 30, 7, 33, 7, 0, time.UTC), `"2026-11-30T07:33:07.000Z"`},
		{"trailing zeros are kept", time.Date(2026, 11, 30, 7, 33, 7, 100000000, time.UTC), `"2026-11-30T07:33:07.100Z"`},
		{"other zones become UTC", time.Date(2026, 11, 30, 8, 33, 7, 5000000, time.FixedZone("CET", 3600)), `"2026-11-30T07:33:07.005Z"`},
		{"the monotonic reading is ignored", time.Date(2026, 1, 1, 0, 0, 0, 1000000, time.UTC).Round(0), `"2026-01-01T00:00:00.001Z"`},
		{"zero time", time.Time{}, `"0001-01-01T00:00:00.000Z"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(Time(tt.in))
			if err != nil || string(got) != tt.want {
				t.Errorf("Marshal(%v) = %s, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
	if _, err := json.Marshal(Time(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))); err == nil {
		t.Error("year 10000 marshalled without error")
	}
}

func TestTimeRoundTrip(t *testing.T) {
	t.Parallel()
	in := Time(time.Date(2026, 11, 30, 7, 33, 7, 123000000, time.UTC))
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Time
	if err := json.Unmarshal(b, &out); err != nil || !time.Time(out).Equal(time.Time(in)) {
		t.Errorf("round trip %s → %v, %v", b, out, err)
	}
	if out.String() != "2026-11-30T07:33:07.123Z" {
		t.Errorf("String() = %q", out.String())
	}
	if err := json.Unmarshal([]byte(`"yesterday"`), &out); err == nil {
		t.Error("Unmarshal accepted a non-time")
	}
}
