package channel

import "strings"

// OutTradeNo is the merchant order number sent to Alipay and WeChat Pay for a payment id:
// the id without its dashes. orderly's payment ids are UUIDs (36 characters with dashes);
// Alipay accepts out_trade_no of letters, digits and underscores up to 64 characters, and
// WeChat Pay 6–32 characters of letters, digits and _-|*, so the 32 hex digits of the UUID
// fit both. PaymentIDFromOutTradeNo reverses it.
func OutTradeNo(paymentID string) string {
	return strings.ReplaceAll(paymentID, "-", "")
}

// PaymentIDFromOutTradeNo returns the payment id an out_trade_no was made from by
// OutTradeNo: 32 lower-case hex digits get the dashes of a UUID back (8-4-4-4-12); any other
// text is returned as it is (it is not one of orderly's ids and will be refused as an
// unknown payment).
func PaymentIDFromOutTradeNo(outTradeNo string) string {
	if len(outTradeNo) != 32 {
		return outTradeNo
	}
	for i := 0; i < len(outTradeNo); i++ {
		c := outTradeNo[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return outTradeNo
		}
	}
	s := outTradeNo
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}
