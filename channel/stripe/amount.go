package stripe

import (
	"fmt"
	"strings"

	"github.com/orderlyhq/orderly"
)

// stripeExponents are the currencies whose Stripe API amount has another exponent than
// ISO 4217's (orderly.CurrencyExponent). Source: Stripe's currency documentation
// (stripe.com/docs/currencies, "Zero-decimal currencies" and "Special cases"): these
// zero-decimal currencies are sent in whole units, and ISK stays a two-decimal currency
// in the API (100 = 1 króna) although ISO gives it no decimals.
var stripeExponents = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "JPY": 0, "KMF": 0, "KRW": 0, "MGA": 0,
	"PYG": 0, "RWF": 0, "UGX": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"ISK": 2,
}

// exponents returns Stripe's and ISO's exponent of currency (upper case).
func exponents(currency string) (stripeExp, isoExp int, err error) {
	isoExp, ok := orderly.CurrencyExponent(currency)
	if !ok {
		return 0, 0, fmt.Errorf("currency %q is not an ISO 4217 currency of money", currency)
	}
	stripeExp, ok = stripeExponents[currency]
	if !ok {
		stripeExp = isoExp
	}
	return stripeExp, isoExp, nil
}

// ToMinor converts a Stripe API amount of currency (any case, as Stripe sends "jpy") to
// orderly's minor units (ISO 4217 exponent), exactly: JPY 80 → 80, USD 1000 ($10.00) →
// 1000, ISK 10000 (100 kr) → 100, MGA 500 → 50000. It returns the upper-case currency.
// Errors: an unknown currency, a negative amount, or an amount that is not a whole number
// of minor units (ISK 150).
func ToMinor(amount int64, currency string) (int64, string, error) {
	cur := strings.ToUpper(currency)
	sExp, iExp, err := exponents(cur)
	if err != nil {
		return 0, "", err
	}
	if amount < 0 {
		return 0, "", fmt.Errorf("negative amount %d %s", amount, cur)
	}
	for ; sExp > iExp; sExp-- {
		if amount%10 != 0 {
			return 0, "", fmt.Errorf("amount %d %s is not a whole number of minor units", amount, cur)
		}
		amount /= 10
	}
	for ; sExp < iExp; sExp++ {
		amount *= 10
	}
	return amount, cur, nil
}

// FromMinor converts orderly's minor units of currency to a Stripe API amount and
// currency (lower case): the inverse of ToMinor. Errors: an unknown currency, or an
// amount Stripe cannot express (MGA 50001: Stripe takes whole ariary).
func FromMinor(amount int64, currency string) (int64, string, error) {
	cur := strings.ToUpper(currency)
	sExp, iExp, err := exponents(cur)
	if err != nil {
		return 0, "", err
	}
	for ; iExp > sExp; iExp-- {
		if amount%10 != 0 {
			return 0, "", fmt.Errorf("amount %d %s cannot be expressed in Stripe's unit of %s", amount, cur, cur)
		}
		amount /= 10
	}
	for ; iExp < sExp; iExp++ {
		amount *= 10
	}
	return amount, strings.ToLower(cur), nil
}
