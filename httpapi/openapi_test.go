package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
)

// openAPI is the part of an OpenAPI 3.0 document that the tests look at.
type openAPI struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas    map[string]openAPISchema    `json:"schemas"`
		Parameters map[string]openAPIParameter `json:"parameters"`
		Responses  map[string]openAPIResponse  `json:"responses"`
	} `json:"components"`
}

type openAPIOperation struct {
	OperationID string                     `json:"operationId"`
	Parameters  []openAPIParameter         `json:"parameters"`
	Responses   map[string]openAPIResponse `json:"responses"`
	// ProviderFormat marks a payment provider's webhook, answered in its own format.
	ProviderFormat bool `json:"x-provider-format"`
	// Scopes are the API key scopes that may call the operation; empty: no key needed.
	Scopes *[]string `json:"x-orderly-scopes"`
}

type openAPIParameter struct {
	Ref  string `json:"$ref"`
	Name string `json:"name"`
	In   string `json:"in"`
}

type openAPIResponse struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema openAPISchema `json:"schema"`
	} `json:"content"`
}

type openAPISchema struct {
	Ref         string                   `json:"$ref"`
	Description string                   `json:"description"`
	Properties  map[string]openAPISchema `json:"properties"`
	Required    []string                 `json:"required"`
}

func loadOpenAPI(t *testing.T) *openAPI {
	t.Helper()
	var doc openAPI
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Fatalf("openapi = %q, want 3.0.x", doc.OpenAPI)
	}
	return &doc
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operations returns the document's operations by "METHOD /path".
func (doc *openAPI) operations(t *testing.T) map[string]*openAPIOperation {
	t.Helper()
	ops := map[string]*openAPIOperation{}
	for path, item := range doc.Paths {
		for key, raw := range item {
			if !slices.Contains(httpMethods, key) {
				continue // "parameters", "summary", …
			}
			var op openAPIOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", key, path, err)
			}
			ops[strings.ToUpper(key)+" "+path] = &op
		}
	}
	return ops
}

// TestOpenAPIMatchesRouter walks the router and checks that every route is documented and
// every documented operation is routed, so that the two cannot drift apart.
func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	documented := doc.operations(t)

	routed := map[string]bool{}
	err := chi.Walk(setup(t).srv.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routed) == 0 {
		t.Fatal("router has no routes")
	}
	for r := range routed {
		if documented[r] == nil {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for op := range documented {
		if !routed[op] {
			t.Errorf("openapi.json documents %s, which has no route", op)
		}
	}
}

// TestOpenAPIOperations checks each operation: a unique operationId, its path parameters
// declared, a success response, and every error response a problem.
func TestOpenAPIOperations(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	ids := map[string]string{}
	pathParam := regexp.MustCompile(`\{([^}]+)\}`)
	for key, op := range doc.operations(t) {
		if op.OperationID == "" {
			t.Errorf("%s has no operationId", key)
		} else if other, dup := ids[op.OperationID]; dup {
			t.Errorf("%s and %s share operationId %s", key, other, op.OperationID)
		}
		ids[op.OperationID] = key

		var inPath []string
		for _, p := range op.Parameters {
			if p.Ref != "" {
				p = doc.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
			}
			if p.In == "path" {
				inPath = append(inPath, p.Name)
			}
		}
		var want []string
		for _, m := range pathParam.FindAllStringSubmatch(strings.SplitN(key, " ", 2)[1], -1) {
			want = append(want, m[1])
		}
		slices.Sort(inPath)
		slices.Sort(want)
		if !slices.Equal(inPath, want) {
			t.Errorf("%s declares path parameters %v, its path has %v", key, inPath, want)
		}

		var success bool
		for status, resp := range op.Responses {
			if strings.HasPrefix(status, "2") {
				success = true
				continue
			}
			if op.ProviderFormat && status != "404" && status != "413" {
				continue // a payment provider's webhook is answered in the provider's format
			}
			if resp.Ref != "" {
				resp = doc.Components.Responses[strings.TrimPrefix(resp.Ref, "#/components/responses/")]
			}
			if s := resp.Content[ProblemContentType].Schema.Ref; s != "#/components/schemas/Problem" {
				t.Errorf("%s response %s is not a problem (schema %q)", key, status, s)
			}
		}
		if !success {
			t.Errorf("%s has no 2xx response", key)
		}
	}
}

// TestOpenAPIRefsResolve checks that every $ref in the document points at something.
func TestOpenAPIRefsResolve(t *testing.T) {
	t.Parallel()
	var root any
	if err := json.Unmarshal(openAPIDocument, &root); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if ref, ok := child.(string); ok && k == "$ref" {
					if resolvePointer(root, ref) == nil {
						t.Errorf("$ref %q does not resolve", ref)
					}
				}
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(root)
}

func resolvePointer(root any, ref string) any {
	path, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	cur := root
	for _, part := range strings.Split(path, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

// TestOpenAPISchemasMatchGoTypes checks that each schema has exactly the JSON members of
// the Go type that the handlers decode or encode.
func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	types := map[string]reflect.Type{
		"Item":                reflect.TypeFor[orderly.Item](),
		"CreateOrderRequest":  reflect.TypeFor[orderly.CreateOrderParams](),
		"Order":               reflect.TypeFor[orderResponse](),
		"OrderList":           reflect.TypeFor[ordersPage](),
		"Transition":          reflect.TypeFor[transitionResponse](),
		"TransitionList":      reflect.TypeFor[historyResponse](),
		"OrderEventRequest":   reflect.TypeFor[orderEventRequest](),
		"StartPaymentRequest": reflect.TypeFor[orderly.StartPaymentParams](),
		"Payment":             reflect.TypeFor[paymentResponse](),
		"PaymentList":         reflect.TypeFor[paymentsResponse](),
		"CallbackRefusal":     reflect.TypeFor[refusalResponse](),
		"CallbackRefusalList": reflect.TypeFor[refusalsResponse](),
		"RefundItem":          reflect.TypeFor[orderly.RefundItem](),
		"CreateRefundRequest": reflect.TypeFor[orderly.CreateRefundParams](),
		"Refund":              reflect.TypeFor[refundResponse](),
		"RefundList":          reflect.TypeFor[refundsResponse](),
		"Callback":            reflect.TypeFor[callbackRequest](),
		"CallbackAck":         reflect.TypeFor[callbackResponse](),
		"StockUpdate":         reflect.TypeFor[stockRequest](),
		"StockAdjustment":     reflect.TypeFor[adjustRequest](),
		"StockPage":           reflect.TypeFor[stockPage](),
		"Event":               reflect.TypeFor[eventResponse](),
		"EventsPage":          reflect.TypeFor[eventsPage](),
		"Stock":               reflect.TypeFor[orderly.Stock](),
		"CreateCouponRequest": reflect.TypeFor[couponRequest](),
		"Coupon":              reflect.TypeFor[couponResponse](),
		"Status":              reflect.TypeFor[statusResponse](),
		"Problem":             reflect.TypeFor[Problem](),
		"CreateDealRequest":   reflect.TypeFor[orderly.CreateDealParams](),
		"Deal":                reflect.TypeFor[dealResponse](),
		"OpenGroupRequest":    reflect.TypeFor[openGroupRequest](),
		"JoinGroupRequest":    reflect.TypeFor[joinGroupRequest](),
		"LeaveGroupRequest":   reflect.TypeFor[leaveGroupRequest](),
		"GroupMember":         reflect.TypeFor[memberResponse](),
		"Group":               reflect.TypeFor[groupResponse](),
		"GroupOrder":          reflect.TypeFor[groupOrderResponse](),
		"Wallet":              reflect.TypeFor[walletResponse](),
		"WalletAccount":       reflect.TypeFor[walletAccountResponse](),
		"WalletEntry":         reflect.TypeFor[walletEntryResponse](),
		"WalletCreditRequest": reflect.TypeFor[walletCreditRequest](),
		"WalletTransfer":      reflect.TypeFor[walletTransferResponse](),
		"Saga":                reflect.TypeFor[sagaResponse](),
		"CreateTripRequest":   reflect.TypeFor[orderly.CreateTripParams](),
		"AssignDriverRequest": reflect.TypeFor[assignDriverRequest](),
		"EndTripRequest":      reflect.TypeFor[endTripRequest](),
		"Trip":                reflect.TypeFor[tripResponse](),
		"SagaStep":            reflect.TypeFor[sagaStepResponse](),
		// Admin routes (admin_orders.go, admin_outbox.go).
		"OperatorAction":      reflect.TypeFor[operatorActionResponse](),
		"OperatorActionList":  reflect.TypeFor[operatorActionsResponse](),
		"AdminOrderList":      reflect.TypeFor[adminOrdersResponse](),
		"AdminOrder":          reflect.TypeFor[adminOrderResponse](),
		"Finding":             reflect.TypeFor[findingResponse](),
		"Reconciliation":      reflect.TypeFor[reconcileResponse](),
		"DeadLetter":          reflect.TypeFor[deadLetterResponse](),
		"DeadLetterList":      reflect.TypeFor[deadLettersResponse](),
		"RedriveFilter":       reflect.TypeFor[redriveWhereRequest](),
		"RedriveResult":       reflect.TypeFor[redriveResponse](),
		"DiscardRequest":      reflect.TypeFor[discardRequest](),
		"DiscardResult":       reflect.TypeFor[discardResponse](),
		"JobRun":              reflect.TypeFor[jobRunResponse](),
		"JobRunList":          reflect.TypeFor[jobRunsResponse](),
		"ReconcileReport":     reflect.TypeFor[reconcileReportResponse](),
		"ReconcileReportList": reflect.TypeFor[reconcileReportsResponse](),
		"Webhook":             reflect.TypeFor[webhookResponse](),
		"WebhookRequest":      reflect.TypeFor[webhookRequest](),
		// The admin page's reads (admin_overview.go).
		"Overview":          reflect.TypeFor[overviewResponse](),
		"StateCount":        reflect.TypeFor[stateCountResponse](),
		"Deadline":          reflect.TypeFor[deadlineResponse](),
		"LatenessHistogram": reflect.TypeFor[latenessResponse](),
		"SagaList":          reflect.TypeFor[sagasResponse](),
		"GroupList":         reflect.TypeFor[groupsResponse](),
		"NextAction":        reflect.TypeFor[orderly.NextAction](),
		"Metadata":          reflect.TypeFor[orderly.Metadata](),
		"MetadataPatch":     reflect.TypeFor[metadataPatchRequest](),
	}
	for name, schema := range doc.Components.Schemas {
		typ, ok := types[name]
		if !ok {
			t.Errorf("schema %s has no Go type in this test", name)
			continue
		}
		if typ.Kind() == reflect.Map { // a map is an object of additionalProperties only
			if len(schema.Properties) != 0 {
				t.Errorf("schema %s of map %v has properties", name, typ)
			}
			continue
		}
		props := make([]string, 0, len(schema.Properties))
		for p := range schema.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		if fields := jsonFieldNames(typ); !slices.Equal(props, fields) {
			t.Errorf("schema %s has properties %v, %v has JSON fields %v", name, props, typ, fields)
		}
		for _, r := range schema.Required {
			if !slices.Contains(props, r) {
				t.Errorf("schema %s requires %q, which is not a property", name, r)
			}
		}
	}
	for name := range types {
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("schema %s is missing", name)
		}
	}

	// The Problem schema lists every code with its status, from the one table.
	desc := doc.Components.Schemas["Problem"].Description
	for code, kind := range problemKinds {
		if want := fmt.Sprintf("%s %d", code, kind.status); !strings.Contains(desc, want) {
			t.Errorf("Problem schema description lacks %q", want)
		}
	}
}

func TestServeOpenAPI(t *testing.T) {
	t.Parallel()
	rec := setup(t).do(newRequest(http.MethodGet, "/openapi.json", ""))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !bytes.Equal(rec.Body.Bytes(), openAPIDocument) {
		t.Errorf("GET /openapi.json = %d %s, %d bytes", rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
	}
	doc := OpenAPIDocument()
	doc[0] = 'x'
	if openAPIDocument[0] == 'x' {
		t.Error("OpenAPIDocument returned the embedded slice, not a copy")
	}
}

// TestOpenAPIDocumentsLimits checks the points of issue 6 that the document missed: the
// callback's 409 (a channel_txn_id already recorded for another payment), the 503 of the
// request deadline, and the 7-day cap of payment_timeout_seconds as its maximum.
func TestOpenAPIDocumentsLimits(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths      map[string]map[string]struct{ Responses map[string]any } `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct{ Maximum *int64 } `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	for _, status := range []string{"409", "503"} {
		if _, ok := doc.Paths["/v1/payments/callback"]["post"].Responses[status]; !ok {
			t.Errorf("POST /v1/payments/callback does not document %s", status)
		}
	}
	want := int64(order.MaxPaymentTimeout / time.Second)
	if got := doc.Components.Schemas["CreateOrderRequest"].Properties["payment_timeout_seconds"].Maximum; got == nil || *got != want {
		t.Errorf("payment_timeout_seconds maximum = %v, want %d (order.MaxPaymentTimeout)", got, want)
	}
}
