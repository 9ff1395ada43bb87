#!/usr/bin/env bash
# The API contract (CI step "API contract"):
#  1. the Go client (client/, its own module) is generated from the current OpenAPI document:
#     regenerating it changes nothing;
#  2. the document makes no breaking change (oasdiff's ERR level: a removed route, property or
#     enum value, a request member that became required, …) against the last release's. Until
#     the first release tag (v*), the baseline is the document the client was first generated
#     from, in commit 90e93db.
# A breaking change that is meant goes with a new major version of the API.
set -euo pipefail
cd "$(dirname "$0")/.."
oasdiff_version=v1.39.0
first_contract=90e93db

generated=(client/openapi.json client/client.gen.go)
before=$(sha256sum "${generated[@]}")
(cd client && go generate ./...)
if [ "$(sha256sum "${generated[@]}")" != "$before" ]; then
  echo "client/ was stale: regenerated from httpapi/openapi.json; commit the result"
  exit 1
fi

base=$(git describe --tags --abbrev=0 --match 'v*' 2>/dev/null || echo "$first_contract")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git show "$base:httpapi/openapi.json" >"$tmp/base.json"
echo "breaking changes of httpapi/openapi.json against $base:"
GOFLAGS= go run "github.com/oasdiff/oasdiff@${oasdiff_version}" breaking "$tmp/base.json" httpapi/openapi.json --fail-on ERR
