package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// deadLetterResponse is the JSON of a dead outbox message.
type deadLetterResponse struct {
	ID        int64           `json:"id"`
	MessageID string          `json:"message_id"`
	Topic     string          `json:"topic"`
	Key       string          `json:"key"`
	Sequence  int64           `json:"sequence"`
	Attempts  int64           `json:"attempts"`
	LastError string          `json:"last_error"`
	CreatedAt Time            `json:"created_at"`
	AgeMS     int64           `json:"age_ms"` // since created_at, at the answer
	Payload   json.RawMessage `json:"payload"`
}

// deadLettersResponse is the body of GET /v1/admin/outbox/dead.
type deadLettersResponse struct {
	Messages   []*deadLetterResponse `json:"messages"`
	NextCursor string                `json:"next_cursor,omitempty"`
}

// outboxFilter reads the topic, created_from and created_to query parameters.
func outboxFilter(q url.Values) (store.OutboxFilter, error) {
	f := store.OutboxFilter{Topic: q.Get("topic")}
	var err error
	if f.CreatedFrom, err = queryTime(q, "created_from"); err != nil {
		return f, err
	}
	f.CreatedTo, err = queryTime(q, "created_to")
	return f, err
}

// adminDeadLetters handles GET /v1/admin/outbox/dead: dead messages by id, filtered by
// topic and created_from/created_to, limit per page (default 100, at most 1000),
// next_cursor to continue. 422 for a bad parameter.
func (s *Server) adminDeadLetters(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	q := r.URL.Query()
	f, err := outboxFilter(q)
	if err == nil {
		f.Limit, err = queryLimit(q)
	}
	var after string
	if err == nil {
		after, err = decodeCursor(q)
	}
	if err == nil && after != "" {
		if f.AfterID, err = strconv.ParseInt(after, 10, 64); err != nil {
			err = invalidf("cursor is not a cursor of this list: pass next_cursor as it was given")
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ms, next, err := svc.DeadLetters(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now := s.now()
	resp := &deadLettersResponse{Messages: make([]*deadLetterResponse, len(ms))}
	if next > 0 {
		resp.NextCursor = encodeCursor(strconv.FormatInt(next, 10))
	}
	for i, m := range ms {
		resp.Messages[i] = &deadLetterResponse{ID: m.ID, MessageID: m.MessageID, Topic: m.Topic, Key: m.Key, Sequence: m.Sequence,
			Attempts: m.Attempts, LastError: m.LastError, CreatedAt: Time(m.CreatedAt), AgeMS: max(now.Sub(m.CreatedAt).Milliseconds(), 0),
			Payload: m.Payload}
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// messageID reads the {id} path parameter of an outbox message; EINVALID when it is not a
// positive integer.
func messageID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(pathParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, invalidf("a message id is a positive integer")
	}
	return id, nil
}

// redriveResponse is the body of the re-drive routes.
type redriveResponse struct {
	Redriven int `json:"redriven"`
}

// adminRedrive handles POST /v1/admin/outbox/dead/{id}/redrive: the dead message becomes
// pending again (attempts 0, due now) and the relay delivers it; audited. 404 when there
// is no dead message with that id.
func (s *Server) adminRedrive(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	id, err := messageID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	by, err := actor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := svc.Redrive(r.Context(), id, by); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, &redriveResponse{Redriven: 1})
}

// redriveWhereRequest is the body of POST /v1/admin/outbox/dead/redrive.
type redriveWhereRequest struct {
	Topic       string `json:"topic,omitempty"`
	CreatedFrom *Time  `json:"created_from,omitempty"`
	CreatedTo   *Time  `json:"created_to,omitempty"`
}

// adminRedriveWhere handles POST /v1/admin/outbox/dead/redrive: every dead message of the
// filter (an empty body: every dead message) is re-driven, each audited; the answer counts
// them.
func (s *Server) adminRedriveWhere(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	var req redriveWhereRequest
	if !s.decode(w, r, &req, bodyOptional) {
		return
	}
	by, err := actor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	f := store.OutboxFilter{Topic: req.Topic}
	if req.CreatedFrom != nil {
		f.CreatedFrom = time.Time(*req.CreatedFrom).UTC()
	}
	if req.CreatedTo != nil {
		f.CreatedTo = time.Time(*req.CreatedTo).UTC()
	}
	n, err := svc.RedriveWhere(r.Context(), f, by)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, &redriveResponse{Redriven: n})
}

// discardRequest is the body of POST /v1/admin/outbox/dead/{id}/discard.
type discardRequest struct {
	Reason string `json:"reason"`
}

// discardResponse is the answer of a discard.
type discardResponse struct {
	Discarded int64 `json:"discarded"`
}

// adminDiscard handles POST /v1/admin/outbox/dead/{id}/discard {"reason"}: the dead
// message is deleted for good; the audit keeps it (topic, key, payload) with the reason.
// 422 without a reason, 404 when there is no dead message with that id.
func (s *Server) adminDiscard(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	id, err := messageID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req discardRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	by, err := actor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := svc.Discard(r.Context(), id, req.Reason, by); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, &discardResponse{Discarded: id})
}

// jobRunResponse is the JSON of one job run.
type jobRunResponse struct {
	ID         int64  `json:"id"`
	Job        string `json:"job"`
	Instance   string `json:"instance"`
	Token      int64  `json:"token"`
	StartedAt  Time   `json:"started_at"`
	FinishedAt Time   `json:"finished_at"`
	DurationMS int64  `json:"duration_ms"`
	Scanned    int64  `json:"scanned"`
	Changed    int64  `json:"changed"`
	Outcome    string `json:"outcome"` // ok or error
	Error      string `json:"error,omitempty"`
}

// jobRunsResponse is the body of GET /v1/admin/jobs/runs.
type jobRunsResponse struct {
	Runs []*jobRunResponse `json:"runs"`
}

// adminJobRuns handles GET /v1/admin/jobs/runs?job=&limit=: the runs of the periodic jobs
// (sweep, deep_check, outbox_retention, reconcile), newest first.
func (s *Server) adminJobRuns(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	q := r.URL.Query()
	n, err := queryLimit(q)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	runs, err := svc.JobRuns(r.Context(), q.Get("job"), n)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &jobRunsResponse{Runs: make([]*jobRunResponse, len(runs))}
	for i, run := range runs {
		outcome := "ok"
		if run.Error != "" {
			outcome = "error"
		}
		resp.Runs[i] = &jobRunResponse{ID: run.ID, Job: run.Job, Instance: run.Instance, Token: run.Token,
			StartedAt: Time(run.StartedAt), FinishedAt: Time(run.FinishedAt), DurationMS: run.FinishedAt.Sub(run.StartedAt).Milliseconds(),
			Scanned: run.Scanned, Changed: run.Changed, Outcome: outcome, Error: run.Error}
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// operatorActionsResponse is the body of GET /v1/admin/actions.
type operatorActionsResponse struct {
	Actions    []*operatorActionResponse `json:"actions"`
	NextCursor string                    `json:"next_cursor,omitempty"`
}

// adminActions handles GET /v1/admin/actions?target=&limit=&cursor=: the audit of operator
// actions, newest first.
func (s *Server) adminActions(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	q := r.URL.Query()
	n, err := queryLimit(q)
	var before int64
	if err == nil {
		var c string
		if c, err = decodeCursor(q); err == nil && c != "" {
			if before, err = strconv.ParseInt(c, 10, 64); err != nil {
				err = invalidf("cursor is not a cursor of this list: pass next_cursor as it was given")
			}
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	as, next, err := svc.Actions(r.Context(), q.Get("target"), before, n)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &operatorActionsResponse{Actions: make([]*operatorActionResponse, len(as))}
	if next > 0 {
		resp.NextCursor = encodeCursor(strconv.FormatInt(next, 10))
	}
	for i, a := range as {
		resp.Actions[i] = newOperatorActionResponse(a)
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// reconcileReportResponse is the JSON of one reconciliation report.
type reconcileReportResponse struct {
	ID         int64           `json:"id"`
	Instance   string          `json:"instance"`
	StartedAt  Time            `json:"started_at"`
	FinishedAt Time            `json:"finished_at"`
	Findings   int64           `json:"findings"`
	Repaired   int64           `json:"repaired"`
	Report     json.RawMessage `json:"report"`
}

// reconcileReportsResponse is the body of GET /v1/admin/reconcile/reports.
type reconcileReportsResponse struct {
	Reports []*reconcileReportResponse `json:"reports"`
}

// adminReports handles GET /v1/admin/reconcile/reports?limit=: the reports of the periodic
// reconciliation, newest first, each with its findings as `orderly reconcile --json`
// prints them.
func (s *Server) adminReports(w http.ResponseWriter, r *http.Request) {
	svc := s.adminService(w, r)
	if svc == nil {
		return
	}
	n, err := queryLimit(r.URL.Query())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rs, err := svc.Reports(r.Context(), n)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &reconcileReportsResponse{Reports: make([]*reconcileReportResponse, len(rs))}
	for i, rep := range rs {
		resp.Reports[i] = &reconcileReportResponse{ID: rep.ID, Instance: rep.Instance, StartedAt: Time(rep.StartedAt),
			FinishedAt: Time(rep.FinishedAt), Findings: rep.Findings, Repaired: rep.Repaired, Report: rep.Report}
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}
