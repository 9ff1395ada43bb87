// Package openapicheck_test validates httpapi's OpenAPI document (../openapi.json) with two
// well-kept validators. It is a module of its own (CI runs it; `go test ./...` of the main
// module does not): their dependencies took 200 s of a cold `go test ./...` to compile.
package openapicheck_test

import (
	"os"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// TestOpenAPIValid validates the document twice: against the official OpenAPI 3.0 JSON
// Schema (pb33f/libopenapi-validator), which refused the `"required": []` the document used
// to hold, and with kin-openapi, which also resolves references and checks examples and
// defaults against their schemas.
func TestOpenAPIValid(t *testing.T) {
	t.Parallel()
	document, err := os.ReadFile("../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := libopenapi.NewDocument(document)
	if err != nil {
		t.Fatalf("parse openapi.json: %v", err)
	}
	v, errs := validator.NewValidator(spec)
	if len(errs) > 0 {
		t.Fatalf("openapi.json: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("openapi.json is not valid OpenAPI 3.0: %s", e.Error())
		}
	}

	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation(), openapi3.EnableSchemaDefaultsValidation(),
		openapi3.EnableSchemaPatternValidation()); err != nil {
		t.Fatalf("openapi.json is not valid OpenAPI %s: %v", doc.OpenAPI, err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
}
