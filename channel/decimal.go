package channel

import (
	"strconv"
	"strings"

	"github.com/orderlyhq/orderly"
)

// ParseDecimal converts a provider's decimal amount in major units of currency (Alipay's
// total_amount "0.01" yuan) to int64 minor units, exactly, with string arithmetic: no float
// ever touches the value. "0.01" CNY → 1, "1.10" → 110, "12" → 1200, "80" JPY → 80.
//
// The text is digits with at most one '.' and at most the currency's exponent of decimals
// (orderly.CurrencyExponent): "1.005" CNY and "80.5" JPY are refused, never rounded. A sign,
// exponent, spaces, a leading or trailing '.' or an empty string are refused too. Errors:
// *orderly.Error EINVALID (malformed, too many decimals, out of int64 range, unknown
// currency).
func ParseDecimal(s, currency string) (int64, error) {
	exp, ok := orderly.CurrencyExponent(currency)
	if !ok {
		return 0, orderly.Errorf(orderly.EINVALID, "unknown currency %q", currency)
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || (hasDot && frac == "") || !allDigits(whole) || !allDigits(frac) {
		return 0, orderly.Errorf(orderly.EINVALID, "amount %q is not a decimal number", s)
	}
	if len(frac) > exp {
		return 0, orderly.Errorf(orderly.EINVALID, "amount %q has more than %d decimals for %s", s, exp, currency)
	}
	digits := whole + frac + strings.Repeat("0", exp-len(frac))
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, orderly.Errorf(orderly.EINVALID, "amount %q is out of range", s)
	}
	return v, nil
}

// FormatDecimal is the inverse of ParseDecimal: minor units of currency as a decimal in
// major units with exactly the currency's exponent of decimals (1 CNY → "0.01", 110 →
// "1.10", 80 JPY → "80"). Errors: *orderly.Error EINVALID for a negative amount or an
// unknown currency.
func FormatDecimal(minor int64, currency string) (string, error) {
	exp, ok := orderly.CurrencyExponent(currency)
	if !ok {
		return "", orderly.Errorf(orderly.EINVALID, "unknown currency %q", currency)
	}
	if minor < 0 {
		return "", orderly.Errorf(orderly.EINVALID, "amount %d is negative", minor)
	}
	s := strconv.FormatInt(minor, 10)
	if exp == 0 {
		return s, nil
	}
	if len(s) <= exp {
		s = strings.Repeat("0", exp-len(s)+1) + s
	}
	return s[:len(s)-exp] + "." + s[len(s)-exp:], nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
