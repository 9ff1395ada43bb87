package orderly

import (
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// Bounds of a Metadata map, as Stripe's: a shop's own references, not a document store.
const (
	MetadataMaxKeys     = 50  // keys per object
	MetadataMaxKeyLen   = 40  // bytes of UTF-8 per key
	MetadataMaxValueLen = 500 // bytes of UTF-8 per value
)

// Metadata is the merchant's own key-value data on an order, trip, payment, refund or
// group: a cart id, a customer number. orderly stores it, returns it, and carries it in the
// events about the object; it never reads it. Keys are 1 … MetadataMaxKeyLen bytes, values
// 0 … MetadataMaxValueLen bytes, both valid UTF-8, at most MetadataMaxKeys keys; nil and
// empty mean none.
type Metadata map[string]string

// Validate checks m against the bounds above: EINVALID naming the first key that breaks
// one (in key order), nil when m is within them.
func (m Metadata) Validate() error {
	if len(m) > MetadataMaxKeys {
		return Errorf(EINVALID, "metadata: at most %d keys, got %d", MetadataMaxKeys, len(m))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		switch {
		case k == "" || len(k) > MetadataMaxKeyLen || !utf8.ValidString(k):
			return Errorf(EINVALID, "metadata: key %q must be 1 to %d bytes of UTF-8", truncate(k, MetadataMaxKeyLen), MetadataMaxKeyLen)
		case len(v) > MetadataMaxValueLen || !utf8.ValidString(v):
			return Errorf(EINVALID, "metadata[%q]: the value must be at most %d bytes of UTF-8, got %d", k, MetadataMaxValueLen, len(v))
		}
	}
	return nil
}

// MetadataPatch is a JSON merge patch (RFC 7396) of a Metadata: a key with a string sets
// that key, a key with null removes it, keys not named are kept.
type MetadataPatch map[string]*string

// Apply returns m with p applied and validated: EINVALID (see Metadata.Validate) when the
// result breaks a bound. m is not changed; the result is nil when no key is left.
func (m Metadata) Apply(p MetadataPatch) (Metadata, error) {
	out := maps.Clone(m)
	for k, v := range p {
		if v == nil {
			delete(out, k)
			continue
		}
		if out == nil {
			out = Metadata{}
		}
		out[k] = *v
	}
	if len(out) == 0 {
		out = nil
	} else if len(out) > MetadataMaxKeys {
		return nil, Errorf(EINVALID, "metadata: at most %d keys; with this patch the object would hold %d (it holds %d): remove some with null",
			MetadataMaxKeys, len(out), len(m))
	}
	return out, out.Validate()
}

// MetadataOf names the kind of object whose metadata MetadataService.UpdateMetadata
// changes. A trip's metadata is its order's.
type MetadataOf string

// Objects that carry metadata.
const (
	MetadataOfOrder   MetadataOf = "order"
	MetadataOfPayment MetadataOf = "payment"
	MetadataOfRefund  MetadataOf = "refund"
	MetadataOfGroup   MetadataOf = "group"
)

// truncate cuts s to at most n bytes, for an error message that echoes input.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s…", s[:n])
}
