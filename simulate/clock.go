package simulate

import (
	"context"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// Sources of a ClockOffset.
const (
	ClockSourceDatabase = "database"  // Config.Store's clock (tx.Now), which decides what is due
	ClockSourceHTTPDate = "http_date" // the Date header of the server's answers (1 s resolution)
	ClockSourceNone     = "none"      // not measured: the margin is DefaultClockMargin
)

// DefaultClockMargin is the clock margin when the offset could not be measured.
const DefaultClockMargin = time.Second

// clockSamples is how many reads of the database clock a measurement takes; the one with
// the shortest round trip wins.
const clockSamples = 5

// ClockOffset is the measured offset of the server's clock to this process's: the
// database's clock when Config.Store is set (it decides what is due, docs/concepts/deadlines-and-closing.md), else the
// Date header of the server's answers. It bounds how far a judgement of a deadline may be
// excused: a success acknowledged more than MarginMS before close_at whose order was then
// closed is a violation, however near close_at it came.
type ClockOffset struct {
	// Source is ClockSourceDatabase, ClockSourceHTTPDate or ClockSourceNone.
	Source string `json:"source"`
	// OffsetMS is server − local, in ms, from the midpoint of the quickest read.
	OffsetMS float64 `json:"offset_ms"`
	// UncertaintyMS is how far the true offset may be from OffsetMS: half the read's round
	// trip plus the server clock's resolution (1 ms for the database, 1 s for Date).
	UncertaintyMS float64 `json:"uncertainty_ms"`
	// MarginMS is |OffsetMS| + UncertaintyMS, rounded up to the ms.
	MarginMS float64 `json:"margin_ms"`
}

// margin returns MarginMS as a duration.
func (c ClockOffset) margin() time.Duration {
	return time.Duration(c.MarginMS * float64(time.Millisecond))
}

// newClockOffset builds a ClockOffset from an estimate of server − local and its
// uncertainty.
func newClockOffset(source string, offset, uncertainty time.Duration) ClockOffset {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	margin := offset.Abs() + uncertainty
	return ClockOffset{Source: source, OffsetMS: ms(offset), UncertaintyMS: ms(uncertainty),
		MarginMS: math.Ceil(ms(margin))}
}

// measureClock measures the offset of the server's clock: the database's when there is a
// Store, else the first target's Date header. It never fails: without an answer it returns
// source "none" and DefaultClockMargin.
func (r *runner) measureClock(ctx context.Context) ClockOffset {
	if s := r.cfg.Store; s != nil {
		if c, ok := measureStoreClock(ctx, s); ok {
			return c
		}
	}
	if c, ok := r.measureDateClock(ctx); ok {
		return c
	}
	return ClockOffset{Source: ClockSourceNone, MarginMS: float64(DefaultClockMargin / time.Millisecond)}
}

// measureStoreClock reads the database clock clockSamples times and keeps the read with the
// shortest round trip. The database clock is truncated to the ms, so it may be up to 1 ms
// behind: that ms is part of the uncertainty.
func measureStoreClock(ctx context.Context, s store.Store) (ClockOffset, bool) {
	best := time.Duration(-1)
	var offset time.Duration
	for range clockSamples {
		var db time.Time
		before := time.Now()
		err := s.Read(ctx, func(tx store.Tx) (err error) {
			db, err = tx.Now(ctx)
			return err
		})
		after := time.Now()
		if err != nil {
			continue
		}
		if rtt := after.Sub(before); best < 0 || rtt < best {
			best = rtt
			offset = db.Add(time.Millisecond / 2).Sub(before.Add(rtt / 2))
		}
	}
	if best < 0 {
		return ClockOffset{}, false
	}
	return newClockOffset(ClockSourceDatabase, offset, best/2+time.Millisecond/2), true
}

// measureDateClock reads the Date header of GET /healthz on the first target. Date has a
// resolution of one second: the server's clock was in [Date, Date + 1 s) while a request
// was in flight, so each read bounds the offset to [Date − after, Date + 1 s − before].
// Reads are repeated (every dateProbePause, for up to dateProbeFor) until Date ticks: the
// two reads around the tick bound the offset to about two round trips.
func (r *runner) measureDateClock(ctx context.Context) (ClockOffset, bool) {
	var lo, hi time.Duration
	var first time.Time
	found := false
	for start := time.Now(); time.Since(start) < dateProbeFor; {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.c.targets[0].base+"/healthz", nil)
		if err != nil {
			return ClockOffset{}, false
		}
		before := time.Now()
		resp, err := r.c.hc.Do(req)
		after := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return ClockOffset{}, false
			}
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		_ = resp.Body.Close()
		date, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			return ClockOffset{}, false
		}
		l, h := date.Sub(after), date.Add(time.Second).Sub(before)
		switch {
		case !found:
			lo, hi, first, found = l, h, date, true
		default:
			lo, hi = max(lo, l), min(hi, h) // every read bounds the same offset
		}
		if !date.Equal(first) {
			break // Date ticked: the bounds are as tight as they get
		}
		if sleepUntil(ctx, time.Now().Add(dateProbePause)) != nil {
			return ClockOffset{}, false
		}
	}
	if !found || lo > hi {
		return ClockOffset{}, false
	}
	return newClockOffset(ClockSourceHTTPDate, (lo+hi)/2, (hi-lo)/2), true
}

// Pacing of measureDateClock.
const (
	dateProbeFor   = 1200 * time.Millisecond
	dateProbePause = 5 * time.Millisecond
)
