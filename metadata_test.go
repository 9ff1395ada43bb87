package orderly_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/orderlyhq/orderly"
)

func TestMetadataValidate(t *testing.T) {
	t.Parallel()
	many := orderly.Metadata{}
	for i := range orderly.MetadataMaxKeys {
		many[fmt.Sprintf("k%02d", i)] = "v"
	}
	tooMany := orderly.Metadata{"one-more": ""}
	for k, v := range many {
		tooMany[k] = v
	}
	tests := []struct {
		name string
		m    orderly.Metadata
		want string // "" for valid, else a part of the message
	}{
		{"nil", nil, ""},
		{"at the bounds", orderly.Metadata{strings.Repeat("k", orderly.MetadataMaxKeyLen): strings.Repeat("v", orderly.MetadataMaxValueLen)}, ""},
		{"empty value", orderly.Metadata{"k": ""}, ""},
		{"most keys", many, ""},
		{"one key too many", tooMany, "at most 50 keys, got 51"},
		{"empty key", orderly.Metadata{"": "v"}, `key ""`},
		{"long key", orderly.Metadata{strings.Repeat("k", orderly.MetadataMaxKeyLen+1): "v"}, "1 to 40 bytes"},
		{"long value", orderly.Metadata{"k": strings.Repeat("v", orderly.MetadataMaxValueLen+1)}, `metadata["k"]: the value must be at most 500 bytes of UTF-8, got 501`},
		{"multi-byte value over the bound", orderly.Metadata{"k": strings.Repeat("é", 251)}, "got 502"},
		{"invalid UTF-8 key", orderly.Metadata{"\xff": "v"}, "1 to 40 bytes of UTF-8"},
		{"invalid UTF-8 value", orderly.Metadata{"k": "\xff"}, "bytes of UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.m.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (orderly.ErrorCode(err) != orderly.EINVALID || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want %s containing %q", err, orderly.EINVALID, tt.want)
			}
		})
	}
}

func TestMetadataApply(t *testing.T) {
	t.Parallel()
	s := func(v string) *string { return &v }
	m := orderly.Metadata{"cart": "c-1", "customer": "42"}
	got, err := m.Apply(orderly.MetadataPatch{"customer": nil, "note": s("gift"), "absent": nil})
	if err != nil || len(got) != 2 || got["cart"] != "c-1" || got["note"] != "gift" {
		t.Fatalf("Apply = %v, %v; want cart and note", got, err)
	}
	if len(m) != 2 || m["customer"] != "42" {
		t.Errorf("Apply changed its receiver: %v", m)
	}
	if got, err := m.Apply(orderly.MetadataPatch{"cart": nil, "customer": nil}); err != nil || got != nil {
		t.Errorf("removing every key = %v, %v; want nil", got, err)
	}
	if got, err := orderly.Metadata(nil).Apply(orderly.MetadataPatch{"k": s("v")}); err != nil || got["k"] != "v" {
		t.Errorf("patch of none = %v, %v", got, err)
	}
	over := orderly.MetadataPatch{}
	for i := range orderly.MetadataMaxKeys - 1 {
		over[fmt.Sprint("n", i)] = s("v")
	}
	if _, err := m.Apply(over); orderly.ErrorCode(err) != orderly.EINVALID || !strings.Contains(err.Error(), "would hold 51 (it holds 2)") {
		t.Errorf("a patch past the key bound = %v, want %s naming the count after the patch", err, orderly.EINVALID)
	}
	if _, err := m.Apply(orderly.MetadataPatch{"k": s(strings.Repeat("v", 501))}); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Errorf("a value over the bound = %v, want %s", err, orderly.EINVALID)
	}
}
