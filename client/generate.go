package client

// The client is generated from the server's OpenAPI document, copied here so that this
// module builds on its own. CI fails when the copy or the code is stale
// (scripts/api-check.sh). The generator runs at a pinned version and stays out of go.mod.
//go:generate cp ../httpapi/openapi.json openapi.json
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml openapi.json
