package channel_test

import (
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

func TestParseFormatDecimal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text     string
		currency string
		minor    int64
		code     string
		format   string // FormatDecimal(minor), when it differs from text
	}{
		{"0.01", "CNY", 1, "", ""},
		{"1.10", "CNY", 110, "", ""},
		{"1.1", "CNY", 110, "", "1.10"},
		{"0", "CNY", 0, "", "0.00"},
		{"007.00", "CNY", 700, "", "7.00"},
		{"92233720368547758.07", "CNY", 9223372036854775807, "", ""},
		{"92233720368547758.08", "CNY", 0, orderly.EINVALID, ""},
		{"1.005", "CNY", 0, orderly.EINVALID, ""},
		{"80", "JPY", 80, "", ""},
		{"80.0", "JPY", 0, orderly.EINVALID, ""},
		{"1.250", "KWD", 1250, "", ""},
		{"1.2505", "KWD", 0, orderly.EINVALID, ""},
		{"+1.00", "CNY", 0, orderly.EINVALID, ""},
		{"-1.00", "CNY", 0, orderly.EINVALID, ""},
		{"1,00", "CNY", 0, orderly.EINVALID, ""},
		{"1.0.0", "CNY", 0, orderly.EINVALID, ""},
		{"１.00", "CNY", 0, orderly.EINVALID, ""}, // full-width digit
		{"1.00", "ZZZ", 0, orderly.EINVALID, ""},
	}
	for _, tt := range tests {
		got, err := channel.ParseDecimal(tt.text, tt.currency)
		if orderly.ErrorCode(err) != tt.code || got != tt.minor {
			t.Errorf("ParseDecimal(%q, %s) = %d, %v; want %d, code %q", tt.text, tt.currency, got, err, tt.minor, tt.code)
		}
		if tt.code != "" {
			continue
		}
		want := tt.text
		if tt.format != "" {
			want = tt.format
		}
		if s, err := channel.FormatDecimal(tt.minor, tt.currency); err != nil || s != want {
			t.Errorf("FormatDecimal(%d, %s) = %q, %v; want %q", tt.minor, tt.currency, s, err, want)
		}
	}
	if _, err := channel.FormatDecimal(-1, "CNY"); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Errorf("FormatDecimal(-1) = %v; want EINVALID", err)
	}
}

func TestOutTradeNo(t *testing.T) {
	t.Parallel()
	id := "019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e"
	no := channel.OutTradeNo(id)
	if no != "019a7f3c5e2b7c119d3e4f5a6b7c8d9e" || channel.PaymentIDFromOutTradeNo(no) != id {
		t.Fatalf("OutTradeNo(%s) = %s, back %s", id, no, channel.PaymentIDFromOutTradeNo(no))
	}
	for _, other := range []string{"t1", "019A7F3C5E2B7C119D3E4F5A6B7C8D9E", "019a7f3c5e2b7c119d3e4f5a6b7c8d9z"} {
		if got := channel.PaymentIDFromOutTradeNo(other); got != other {
			t.Errorf("PaymentIDFromOutTradeNo(%s) = %s; want it unchanged", other, got)
		}
	}
}
