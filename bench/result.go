package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is the figures of one scenario run, printed by --json as one line. A field that
// does not apply to the scenario is nil and left out. Peers are the same work done by
// something else (a job queue, a periodic scan) or by orderly under the reference
// condition of the scenario (history: an empty database; pending: 1 000 pending orders);
// they carry Name instead of Scenario and Store.
type Result struct {
	Scenario string `json:"scenario,omitempty"`
	Store    string `json:"store,omitempty"` // "sqlite" or "postgres", "+redis" with --timer redis
	Name     string `json:"name,omitempty"`  // peers only
	// Orders is the number of orders of the run (created, or due in a burst).
	Orders int64 `json:"orders"`
	// EarlyCloses counts orders closed before close_at (a violation of "never early").
	EarlyCloses *int64 `json:"early_closes,omitempty"`
	// LatenessMS is closed_at − close_at of the orders closed for payment timeout, in ms,
	// on the database clock.
	LatenessMS *Lateness `json:"lateness_ms,omitempty"`
	// ClosesPerS is orders closed (with their releases applied) per second.
	ClosesPerS *float64 `json:"closes_per_s,omitempty"`
	// TotalS is, for a burst, the seconds from the common close_at until the last order
	// was closed with its releases applied.
	TotalS *float64 `json:"total_s,omitempty"`
	// CreatedPerS is orders created per second (HTTP 201 answers).
	CreatedPerS *float64 `json:"created_per_s,omitempty"`
	// CreateP99MS is the 99th percentile of the create request's latency as the client saw
	// it, in ms.
	CreateP99MS *float64 `json:"create_p99_ms,omitempty"`
	// OverloadedRequests counts the requests that timed out or were shed with 503: the
	// server did not take the rate (steady). Omitted when none.
	OverloadedRequests *int64 `json:"overloaded_requests,omitempty"`
	// CPUS is the CPU seconds (user + system) the servers used during the measured part.
	CPUS *float64 `json:"cpu_s,omitempty"`
	// PeakRSSMB is the servers' largest peak resident set (VmHWM), in MiB.
	PeakRSSMB *float64 `json:"peak_rss_mb,omitempty"`
	// DBRowWritesPerClose and DBWALBytesPerClose are the rows the database inserted,
	// updated or deleted, and the WAL bytes it wrote, per order closed during a burst
	// (PostgreSQL, from pg_stat_database and the WAL position; the whole database, the
	// relay's delivery marks included).
	DBRowWritesPerClose *float64 `json:"db_row_writes_per_close,omitempty"`
	DBWALBytesPerClose  *float64 `json:"db_wal_bytes_per_close,omitempty"`
	// CommitsPerS and RowWritesPerS are the ceiling scenario's: single-row UPDATE
	// transactions per second, and rows updated per second by 1 000-row statements.
	CommitsPerS   *float64  `json:"commits_per_s,omitempty"`
	RowWritesPerS *float64  `json:"row_writes_per_s,omitempty"`
	Peers         []*Result `json:"peers,omitempty"`
}

// Lateness are percentiles of a lateness distribution, in ms.
type Lateness struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Percentile returns the p-th percentile (0 < p ≤ 100, nearest rank) of sorted values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// NewLateness sorts ms and returns its percentiles; nil for no values.
func NewLateness(ms []float64) *Lateness {
	if len(ms) == 0 {
		return nil
	}
	slices.Sort(ms)
	return &Lateness{P50: Percentile(ms, 50), P90: Percentile(ms, 90), P99: Percentile(ms, 99), Max: ms[len(ms)-1]}
}

// Ptr returns a pointer to v (for Result's optional fields).
func Ptr[T any](v T) *T { return &v }

// round1 rounds to one decimal.
func round1(v float64) float64 { return math.Round(v*10) / 10 }

// WriteJSON writes r as one line of JSON.
func WriteJSON(w io.Writer, r *Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// column is one figure of the table.
type column struct {
	name  string
	get   func(*Result) *float64
	lower bool // a lower value is better: the ratio is peer / orderly
}

var columns = []column{
	{"lateness p50 ms", func(r *Result) *float64 { return latenessField(r, func(l *Lateness) float64 { return l.P50 }) }, true},
	{"p90", func(r *Result) *float64 { return latenessField(r, func(l *Lateness) float64 { return l.P90 }) }, true},
	{"p99", func(r *Result) *float64 { return latenessField(r, func(l *Lateness) float64 { return l.P99 }) }, true},
	{"max", func(r *Result) *float64 { return latenessField(r, func(l *Lateness) float64 { return l.Max }) }, true},
	{"early", func(r *Result) *float64 {
		if r.EarlyCloses == nil {
			return nil
		}
		return Ptr(float64(*r.EarlyCloses))
	}, true},
	{"closes/s", func(r *Result) *float64 { return r.ClosesPerS }, false},
	{"total s", func(r *Result) *float64 { return r.TotalS }, true},
	{"created/s", func(r *Result) *float64 { return r.CreatedPerS }, false},
	{"create p99 ms", func(r *Result) *float64 { return r.CreateP99MS }, true},
	{"overloaded", func(r *Result) *float64 {
		if r.OverloadedRequests == nil {
			return nil
		}
		return Ptr(float64(*r.OverloadedRequests))
	}, true},
	{"cpu s", func(r *Result) *float64 { return r.CPUS }, true},
	{"peak rss MiB", func(r *Result) *float64 { return r.PeakRSSMB }, true},
	{"db rows/close", func(r *Result) *float64 { return r.DBRowWritesPerClose }, true},
	{"db WAL B/close", func(r *Result) *float64 { return r.DBWALBytesPerClose }, true},
	{"commits/s", func(r *Result) *float64 { return r.CommitsPerS }, false},
	{"row writes/s", func(r *Result) *float64 { return r.RowWritesPerS }, false},
}

func latenessField(r *Result, f func(*Lateness) float64) *float64 {
	if r.LatenessMS == nil {
		return nil
	}
	return Ptr(f(r.LatenessMS))
}

// WriteTable prints r as a table: one row for orderly and one per peer, the columns that
// any row has, and under each peer its ratio to orderly per column ("×3.1": the peer's
// figure is 3.1 times orderly's, worse when a lower figure is better; early closes have
// no ratio).
func WriteTable(w io.Writer, r *Result) error {
	fmt.Fprintf(w, "%s on %s: %d orders\n", r.Scenario, r.Store, r.Orders)
	rows := append([]*Result{r}, r.Peers...)
	var cols []column
	for _, c := range columns {
		for _, row := range rows {
			if c.get(row) != nil {
				cols = append(cols, c)
				break
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"", "orders"}
	for _, c := range cols {
		head = append(head, c.name)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for i, row := range rows {
		name := "orderly"
		if i > 0 {
			name = row.Name
		}
		cells := []string{name, fmt.Sprint(row.Orders)}
		for _, c := range cols {
			cells = append(cells, format(c.get(row)))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		if i == 0 {
			continue
		}
		ratios := []string{"  ratio to orderly", ""}
		for _, c := range cols {
			ratios = append(ratios, ratio(c.get(row), c.get(r), c.name == "early"))
		}
		fmt.Fprintln(tw, strings.Join(ratios, "\t")+"\t")
	}
	return tw.Flush()
}

func format(v *float64) string {
	if v == nil {
		return "-"
	}
	if *v >= 100 || *v == math.Trunc(*v) {
		return fmt.Sprintf("%.0f", *v)
	}
	return fmt.Sprintf("%.1f", *v)
}

// ratio returns peer/orderly as "×N", or "" when it has no meaning.
func ratio(peer, orderly *float64, skip bool) string {
	if skip || peer == nil || orderly == nil || *orderly == 0 {
		return ""
	}
	return fmt.Sprintf("×%.2g", *peer / *orderly)
}
