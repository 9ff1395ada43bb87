package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/admin"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/store"
)

// OperatorHeader names the operator of an admin action, written to the audit
// (operator_actions); without it the operator is "admin".
const OperatorHeader = "Orderly-Operator"

// AdminService is the operator's service behind /v1/admin (package admin implements it).
type AdminService interface {
	SearchOrders(ctx context.Context, p store.OrderSearchParams) ([]*orderly.Order, string, error)
	Order(ctx context.Context, id string) (*admin.OrderDetail, error)
	DeadLetters(ctx context.Context, f store.OutboxFilter) ([]*orderly.Message, int64, error)
	Redrive(ctx context.Context, id int64, by admin.Actor) error
	RedriveWhere(ctx context.Context, f store.OutboxFilter, by admin.Actor) (int, error)
	Discard(ctx context.Context, id int64, reason string, by admin.Actor) error
	JobRuns(ctx context.Context, job string, n int) ([]*store.JobRun, error)
	Actions(ctx context.Context, target string, beforeID int64, n int) ([]*store.OperatorAction, int64, error)
	ReconcileOrder(ctx context.Context, id string) ([]*reconcile.Finding, error)
	RepairOrder(ctx context.Context, id string, by admin.Actor) ([]*reconcile.Finding, error)
	Reports(ctx context.Context, n int) ([]*store.ReconcileReport, error)
	Overview(ctx context.Context, deadlines int) (*admin.Overview, error)
	Groups(ctx context.Context, state, afterID string, n int) ([]*orderly.Group, string, error)
}

// adminServiceRoutes registers the operator routes of this file and admin_outbox.go.
func (s *Server) adminServiceRoutes(r chi.Router) {
	r.Get("/orders", s.adminSearchOrders)
	r.Get("/orders/{id}", s.adminGetOrder)
	r.Get("/orders/{id}/reconcile", s.adminReconcileOrder)
	r.Post("/orders/{id}/reconcile", s.adminRepairOrder)
	r.Get("/outbox/dead", s.adminDeadLetters)
	r.Post("/outbox/dead/redrive", s.adminRedriveWhere)
	r.Post("/outbox/dead/{id}/redrive", s.adminRedrive)
	r.Post("/outbox/dead/{id}/discard", s.adminDiscard)
	r.Get("/jobs/runs", s.adminJobRuns)
	r.Get("/actions", s.adminActions)
	r.Get("/reconcile/reports", s.adminReports)
}

// adminService returns the admin service, or answers 404 and returns nil when the server
// has none (Config.Admin).
func (s *Server) adminService(w http.ResponseWriter, r *http.Request) AdminService {
	if s.admin == nil {
		s.writeProblem(w, r, CodeRouteNotFound, "the admin service is not configured")
	}
	return s.admin
}

// actor returns the operator of a request (the Orderly-Operator header, "admin" without
// one) and its trace id; EINVALID for a header over 128 bytes or with control characters.
func actor(r *http.Request) (admin.Actor, error) {
	name := strings.TrimSpace(r.Header.Get(OperatorHeader))
	if len(name) > 128 || strings.ContainsFunc(name, unicode.IsControl) {
		return admin.Actor{}, invalidf("%s must be a name of at most 128 bytes", OperatorHeader)
	}
	if name == "" {
		name = actorAdmin
	}
	return admin.Actor{Operator: name, TraceID: TraceIDFromContext(r.Context())}, nil
}

// queryTime parses an RFC 3339 query parameter; the zero time when absent.
func queryTime(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, invalidf("%s must be an RFC 3339 time, e.g. 2026-11-30T08:00:00Z", name)
	}
	return t.UTC(), nil
}

// queryLimit parses the limit query parameter (1 … admin.MaxLimit); 0 when absent.
func queryLimit(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > admin.MaxLimit {
		return 0, invalidf("limit must be an integer from 1 to %d", admin.MaxLimit)
	}
	return n, nil
}

// encodeCursor makes an opaque cursor of a page's last key; "" for none.
func encodeCursor(key string) string {
	if key == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(key))
}

// decodeCursor reads the cursor query parameter back into its key; EINVALID when it is
// not one this server made.
func decodeCursor(q url.Values) (string, error) {
	c := q.Get("cursor")
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 || !order.ValidID(string(b)) {
		return "", invalidf("cursor is not a cursor of this list: pass next_cursor as it was given")
	}
	return string(b), nil
}

// adminOrdersResponse is the body of GET /v1/admin/orders.
type adminOrdersResponse struct {
	Orders     []*orderResponse `json:"orders"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

// adminSearchOrders handles GET /v1/admin/orders: orders filtered by user_id, state, flow,
// created_from/created_to and closed_from/closed_to (RFC 3339, half-open ranges), by id
// (creation order), limit per page (default 100, at most 1000), next_cursor to continue
// with ?cursor=. Keyset pagination: a page never shifts when orders change. 422 for a bad
// parameter.
func (s *Server) adminSearchOrders(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	q := r.URL.Query()
	p := store.OrderSearchParams{UserID: q.Get("user_id"), State: orderly.State(q.Get("state")), Flow: q.Get("flow")}
	var err error
	if p.CreatedFrom, err = queryTime(q, "created_from"); err == nil {
		if p.CreatedTo, err = queryTime(q, "created_to"); err == nil {
			if p.ClosedFrom, err = queryTime(q, "closed_from"); err == nil {
				if p.ClosedTo, err = queryTime(q, "closed_to"); err == nil {
					if p.Limit, err = queryLimit(q); err == nil {
						p.AfterID, err = decodeCursor(q)
					}
				}
			}
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	os, next, err := svc.SearchOrders(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &adminOrdersResponse{Orders: make([]*orderResponse, len(os)), NextCursor: encodeCursor(next)}
	for i, o := range os {
		resp.Orders[i] = newOrderResponse(o)
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// operatorActionResponse is the JSON of one audited operator action.
type operatorActionResponse struct {
	ID       int64           `json:"id"`
	At       Time            `json:"at"`
	Operator string          `json:"operator"`
	Action   string          `json:"action"`
	Target   string          `json:"target"`
	Reason   string          `json:"reason,omitempty"`
	Detail   json.RawMessage `json:"detail"`
	TraceID  string          `json:"trace_id,omitempty"`
}

func newOperatorActionResponse(a *store.OperatorAction) *operatorActionResponse {
	detail := a.Detail
	if len(detail) == 0 {
		detail = json.RawMessage("{}")
	}
	return &operatorActionResponse{ID: a.ID, At: Time(a.At), Operator: a.Operator, Action: a.Action, Target: a.Target,
		Reason: a.Reason, Detail: detail, TraceID: a.TraceID}
}

// adminOrderResponse is the body of GET /v1/admin/orders/{id}.
type adminOrderResponse struct {
	Order           *orderResponse            `json:"order"`
	Transitions     []*transitionResponse     `json:"transitions"`
	OperatorActions []*operatorActionResponse `json:"operator_actions"`
}

// adminGetOrder handles GET /v1/admin/orders/{id}: the order, its audit trail (oldest
// first) and the operator actions on it (newest first). 404 unknown order.
func (s *Server) adminGetOrder(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	d, err := svc.Order(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &adminOrderResponse{Order: newOrderResponse(d.Order), Transitions: make([]*transitionResponse, len(d.Transitions)),
		OperatorActions: make([]*operatorActionResponse, len(d.Actions))}
	for i, t := range d.Transitions {
		resp.Transitions[i] = newTransitionResponse(t)
	}
	for i, a := range d.Actions {
		resp.OperatorActions[i] = newOperatorActionResponse(a)
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// findingResponse is the JSON of a reconciliation finding.
type findingResponse struct {
	Kind     string `json:"kind"`
	OrderID  string `json:"order_id,omitempty"`
	SKU      string `json:"sku,omitempty"`
	Detail   string `json:"detail"`
	Repaired bool   `json:"repaired"`
	Error    string `json:"error,omitempty"`
}

// reconcileResponse is the body of GET and POST /v1/admin/orders/{id}/reconcile.
type reconcileResponse struct {
	OrderID  string             `json:"order_id"`
	Findings []*findingResponse `json:"findings"`
}

func (s *Server) writeFindings(w http.ResponseWriter, r *http.Request, id string, fs []*reconcile.Finding) {
	resp := &reconcileResponse{OrderID: id, Findings: make([]*findingResponse, len(fs))}
	for i, f := range fs {
		resp.Findings[i] = &findingResponse{Kind: string(f.Kind), OrderID: f.OrderID, SKU: f.SKU, Detail: f.Detail, Repaired: f.Repaired, Error: f.Error}
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// adminReconcileOrder handles GET /v1/admin/orders/{id}/reconcile: the order compared with
// its payments, reservations, coupon, the stock of its SKUs and its undelivered messages,
// read in one transaction; findings [] when all agree. 404 unknown order.
func (s *Server) adminReconcileOrder(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	id := pathParam(r, "id")
	fs, err := svc.ReconcileOrder(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeFindings(w, r, id, fs)
}

// adminRepairOrder handles POST /v1/admin/orders/{id}/reconcile: the findings of GET, each
// repaired when it can be (through the services, audited under the Orderly-Operator
// header): repaired true on those this call repaired. 404 unknown order.
func (s *Server) adminRepairOrder(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	by, err := actor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := pathParam(r, "id")
	fs, err := svc.RepairOrder(r.Context(), id, by)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeFindings(w, r, id, fs)
}
