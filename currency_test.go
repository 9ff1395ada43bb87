package orderly_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/orderlyhq/orderly"
)

// TestCurrencyExponent checks the ISO 4217 table: the codes of issue 6 (XXX and ZZZ were
// accepted as currencies), other non-money codes, and exponents of each size.
func TestCurrencyExponent(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{
		"EUR": 2, "USD": 2, "GBP": 2, "CNY": 2, "JPY": 0, "KRW": 0, "CLP": 0, "ISK": 0, "VND": 0, "XAF": 0,
		"KWD": 3, "BHD": 3, "IQD": 3, "TND": 3, "XCD": 2, "VES": 2, "ZWG": 2, "XCG": 2,
	} {
		if got, ok := orderly.CurrencyExponent(code); !ok || got != want {
			t.Errorf("CurrencyExponent(%s) = %d, %v; want %d, true", code, got, ok, want)
		}
	}
	for _, code := range []string{
		"XXX", "ZZZ", "XTS", "XAU", "XAG", "XPT", "XPD", "XDR", "XBA", "XSU", "XUA", // not money
		"CLF", "USN", "BOV", "CHE", "UYW", // funds codes
		"HRK", "VEF", "MRO", "DEM", // withdrawn
		"", "eur", "Eur", "EURO", "EU", "E\x00R", "€",
	} {
		if got, ok := orderly.CurrencyExponent(code); ok || orderly.ValidCurrency(code) {
			t.Errorf("CurrencyExponent(%q) = %d, true; want it refused", code, got)
		}
	}
	if !orderly.ValidCurrency("EUR") {
		t.Error("ValidCurrency(EUR) = false")
	}
}

func TestValidAmount(t *testing.T) {
	t.Parallel()
	for v, want := range map[int64]bool{0: false, -1: false, 1: true, orderly.MaxAmount: true, orderly.MaxAmount + 1: false} {
		if got := orderly.ValidAmount(v); got != want {
			t.Errorf("ValidAmount(%d) = %t, want %t", v, got, want)
		}
	}
	if want := fmt.Sprintf("1 to %d minor units", int64(orderly.MaxAmount)); !strings.Contains(orderly.AmountRule, want) {
		t.Errorf("AmountRule %q does not say %q", orderly.AmountRule, want)
	}
}
