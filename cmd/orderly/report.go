package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/orderlyhq/orderly/simulate/cluster"
	"github.com/orderlyhq/orderly/verify"
)

// writeVerifyReport writes the counts of a verify report as a small table, each breakdown
// as name=count sorted by name:
//
//	orders          13  closed=12 paid=1
//	  pay status        paid=1 unpaid=12
//	  close reason      buyer_cancelled=2 payment_timeout=10
//	payments        13  refunded=2 succeeded=11
//	outbox          33  delivered=33
//	groups           2  failed=1 succeeded=1   (when the group rules ran)
//	early closes     0
//	overdue          0
func writeVerifyReport(w io.Writer, rep *verify.Report) {
	var outbox int64
	for _, n := range rep.OutboxByState {
		outbox += n
	}
	type row struct {
		name  string
		total string
		by    map[string]int64
	}
	rows := []row{
		{"orders", fmt.Sprint(rep.Orders), rep.OrdersByState},
		{"  pay status", "", rep.OrdersByPayStatus},
		{"  close reason", "", rep.OrdersByCloseReason},
		{"payments", fmt.Sprint(rep.Payments), rep.PaymentsByState},
		{"outbox", fmt.Sprint(outbox), rep.OutboxByState},
		{"early closes", fmt.Sprint(rep.EarlyCloses), nil},
		{"overdue", fmt.Sprint(rep.Overdue), nil},
	}
	if rep.Groups != nil { // the group rules ran (Options.Groups)
		var groups int64
		for _, n := range rep.Groups {
			groups += n
		}
		rows = slices.Insert(rows, 5, row{"groups", fmt.Sprint(groups), rep.Groups})
	}
	for _, r := range rows {
		line := fmt.Sprintf("%-14s %3s  %s", r.name, r.total, counts(r.by))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

// counts formats a breakdown as "a=1 b=2", sorted by name; "" when it is empty.
func counts(m map[string]int64) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// writeFaults prints the faults injected, one a line, for the summary.
func writeFaults(w io.Writer, faults []cluster.FaultRecord) {
	for i, f := range faults {
		label := ""
		if i == 0 {
			label = "faults"
		}
		fmt.Fprintf(w, "  %-11s %s %s at %s for %d ms", label, f.Kind, f.Target, f.At.Format("15:04:05.000"), f.DurationMS)
		if f.Error != "" {
			fmt.Fprintf(w, " (%s)", f.Error)
		}
		fmt.Fprintln(w)
	}
}
