package httpapi

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/admin"
)

// adminOverviewRoutes registers the reads of the admin page (/admin) that package admin's
// other routes do not give: the overview and the stuck sagas.
func (s *Server) adminOverviewRoutes(r chi.Router) {
	r.Get("/overview", s.adminOverview)
	r.Get("/sagas/stuck", s.adminStuckSagas)
	r.Get("/groups", s.adminGroups)
}

// stateCountResponse is the number of orders of one flow in one state.
type stateCountResponse struct {
	Flow  string        `json:"flow"`
	State orderly.State `json:"state"`
	Count int64         `json:"count"`
}

// deadlineResponse is one open order the timer acts on next.
type deadlineResponse struct {
	OrderID   string            `json:"order_id"`
	Flow      string            `json:"flow"`
	State     orderly.State     `json:"state"`
	PayStatus orderly.PayStatus `json:"pay_status"`
	CloseAt   Time              `json:"close_at"`
	WakeAt    Time              `json:"wake_at"`
	// WakeInMS is wake_at − now (the database clock), in ms; negative when overdue.
	WakeInMS int64 `json:"wake_in_ms"`
}

// outboxBacklogResponse is the outbox's undelivered messages.
type outboxBacklogResponse struct {
	Pending int64 `json:"pending"`
	Dead    int64 `json:"dead"`
	// OldestPendingAgeMS is the age of the oldest pending message in ms, 0 when none.
	OldestPendingAgeMS int64 `json:"oldest_pending_age_ms"`
}

// latencyBucketResponse is one cumulative bucket: Count closes were at most LeMS late.
type latencyBucketResponse struct {
	LeMS  float64 `json:"le_ms"`
	Count uint64  `json:"count"`
}

// latenessResponse is the close lateness histogram of one trigger.
type latenessResponse struct {
	Trigger string                  `json:"trigger"`
	Count   uint64                  `json:"count"`
	SumMS   float64                 `json:"sum_ms"`
	Buckets []latencyBucketResponse `json:"buckets"`
}

// overviewResponse is the body of GET /v1/admin/overview.
type overviewResponse struct {
	Now           Time                  `json:"now"`
	OrdersByState []stateCountResponse  `json:"orders_by_state"`
	NextDeadlines []deadlineResponse    `json:"next_deadlines"`
	Outbox        outboxBacklogResponse `json:"outbox"`
	CloseLateness []latenessResponse    `json:"close_lateness"`
}

// millis is d in milliseconds, with its fraction (a lateness bucket of 2.5 ms is 2.5).
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// adminOverview handles GET /v1/admin/overview?deadlines=: the orders by flow and state
// (counted in the database), the next deadlines (open orders by wake_at, default 10, at
// most 1000), the outbox backlog and this instance's close lateness histogram by trigger
// (buckets cumulative, in ms, as orderly_close_lateness_seconds). 422 for a bad
// deadlines.
func (s *Server) adminOverview(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	n := 0
	if v := r.URL.Query().Get("deadlines"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > admin.MaxLimit {
			s.writeError(w, r, invalidf("deadlines must be an integer from 1 to %d", admin.MaxLimit))
			return
		}
	}
	o, err := svc.Overview(r.Context(), n)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &overviewResponse{Now: Time(o.Now), OrdersByState: make([]stateCountResponse, len(o.Counts)),
		NextDeadlines: make([]deadlineResponse, len(o.NextWake)), CloseLateness: make([]latenessResponse, len(o.Lateness)),
		Outbox: outboxBacklogResponse{Pending: o.OutboxPending, Dead: o.OutboxDead}}
	if !o.OldestPending.IsZero() {
		resp.Outbox.OldestPendingAgeMS = admin.Age(o.OldestPending, o.Now)
	}
	for i, c := range o.Counts {
		resp.OrdersByState[i] = stateCountResponse{Flow: c.Flow, State: c.State, Count: c.Count}
	}
	for i, d := range o.NextWake {
		resp.NextDeadlines[i] = deadlineResponse{OrderID: d.ID, Flow: d.Flow, State: d.State, PayStatus: d.PayStatus,
			CloseAt: Time(d.CloseAt), WakeAt: Time(d.WakeAt), WakeInMS: d.WakeAt.Sub(o.Now).Milliseconds()}
	}
	for i, l := range o.Lateness {
		lr := latenessResponse{Trigger: l.Trigger, Count: l.Count, SumMS: millis(l.Sum), Buckets: make([]latencyBucketResponse, len(l.Buckets))}
		for j, b := range l.Buckets {
			lr.Buckets[j] = latencyBucketResponse{LeMS: millis(b.UpperBound), Count: b.Count}
		}
		resp.CloseLateness[i] = lr
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// sagasResponse is the body of GET /v1/admin/sagas/stuck.
type sagasResponse struct {
	Sagas      []*sagaResponse `json:"sagas"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

// adminStuckSagas handles GET /v1/admin/sagas/stuck?limit=&cursor=: stuck sagas (a
// compensation used its attempts; POST /v1/admin/sagas/{id}/redrive resumes one) by id,
// each without its step log (steps []; GET /v1/sagas/{id} reads it), limit per page
// (default 100, at most 1000), next_cursor to continue. 404 when sagas are not enabled.
func (s *Server) adminStuckSagas(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := queryLimit(q)
	var after string
	if err == nil {
		after, err = decodeCursor(q)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if n == 0 {
		n = admin.DefaultLimit
	}
	list, err := s.sagas.ListStuck(r.Context(), after, n+1) // one more tells whether there is a next page
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &sagasResponse{Sagas: make([]*sagaResponse, 0, min(len(list), n))}
	if len(list) > n {
		list = list[:n]
		resp.NextCursor = encodeCursor(list[n-1].ID)
	}
	for _, in := range list {
		resp.Sagas = append(resp.Sagas, newSagaResponse(in, nil))
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// groupsResponse is the body of GET /v1/admin/groups.
type groupsResponse struct {
	Groups     []*groupResponse `json:"groups"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

// adminGroups handles GET /v1/admin/groups?state=&limit=&cursor=: group-buy groups in
// state forming, succeeded or failed, or stuck (the default: forming more than a minute
// past their deadline, which the timer should have failed), by id, each without its
// members (members []; GET /v1/groups/{id} reads them), limit per page (default 100, at
// most 1000), next_cursor to continue. 422 for another state.
func (s *Server) adminGroups(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	q := r.URL.Query()
	n, err := queryLimit(q)
	var after string
	if err == nil {
		after, err = decodeCursor(q)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	gs, next, err := svc.Groups(r.Context(), cmp.Or(q.Get("state"), admin.GroupStateStuck), after, n)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &groupsResponse{Groups: make([]*groupResponse, len(gs)), NextCursor: encodeCursor(next)}
	for i, g := range gs {
		resp.Groups[i] = newGroupResponse(g)
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}
