package channel

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
)

// Route is one channel, or one variant of a channel, in a Router's rotation with its share
// of the traffic: Weight out of the sum of the weights of the routes in rotation. Channel
// is the Name of the adapter that serves it. Two versions of one provider in a gray release
// are two adapters named as variants of one channel, "stripe@v1" and "stripe@v2"
// (orderly.RouteName): their payments record channel "stripe" and variant "v1" or "v2",
// and Stats compares the variants.
type Route struct {
	Channel string // "stripe", or "stripe@v2" for variant v2 of channel stripe
	Weight  int    // > 0
}

// RouterConfig configures a Router. Zero values mean the documented defaults.
type RouterConfig struct {
	Routes []Route
	// Floor is the success rate (0–1) below which a channel is taken out of rotation once
	// it stayed below for For; 0 turns the automatic removal off.
	Floor float64
	// For is how long the success rate must stay below Floor; 5 minutes.
	For time.Duration
	// Window is the span of outcomes the success rate is computed over; 5 minutes.
	Window time.Duration
	// MinSamples is the fewest outcomes in the window for a rate to count; 20.
	MinSamples int
	// Now is the clock; time.Now.
	Now func() time.Time
	// OnRemoved, when set, is called (without the router's lock) with a channel taken out
	// of rotation and its success rate: for a metric.
	OnRemoved func(channel string, rate float64)
	Logger    *slog.Logger
}

// Router picks the channel of a payment attempt: a sticky split by user (FNV-1a of the
// user id mod 100 against the cumulative weights, so one user always lands on the same
// channel while the rotation is unchanged), and takes a channel whose success rate falls
// below the floor for a while out of rotation. It is safe for concurrent use.
type Router struct {
	cfg RouterConfig

	mu         sync.Mutex
	outcomes   map[string][]outcome // per channel, oldest first, within Window
	belowSince map[string]time.Time // when the rate fell below the floor
	removed    map[string]bool
}

type outcome struct {
	at time.Time
	ok bool
}

// NewRouter returns a Router. Errors: no route, a weight not positive, a channel twice.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if len(cfg.Routes) == 0 {
		return nil, errors.New("channel: a router needs at least one route")
	}
	seen := map[string]bool{}
	for _, r := range cfg.Routes {
		if r.Weight <= 0 || r.Channel == "" || seen[r.Channel] {
			return nil, fmt.Errorf("channel: route %q with weight %d: the channel must be named once with a positive weight", r.Channel, r.Weight)
		}
		seen[r.Channel] = true
	}
	if cfg.For <= 0 {
		cfg.For = 5 * time.Minute
	}
	if cfg.Window <= 0 {
		cfg.Window = 5 * time.Minute
	}
	if cfg.MinSamples <= 0 {
		cfg.MinSamples = 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Router{cfg: cfg, outcomes: map[string][]outcome{}, belowSince: map[string]time.Time{}, removed: map[string]bool{}}, nil
}

// Bucket returns the sticky bucket of a user, 0–99: FNV-1a (32-bit) of the user id mod 100.
func Bucket(userID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(userID))
	return int(h.Sum32() % 100)
}

// Pick returns the channel of a new attempt of userID among the routes in rotation, the
// weights scaled to 100 buckets. When every route is out of rotation it returns the
// first route's channel (a payment is never refused for want of a channel).
func (r *Router) Pick(userID string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	for _, rt := range r.cfg.Routes {
		if !r.removed[rt.Channel] {
			total += rt.Weight
		}
	}
	if total == 0 {
		return r.cfg.Routes[0].Channel
	}
	point := float64(Bucket(userID)) + 0.5 // the bucket's middle, in [0, 100)
	acc := 0
	last := ""
	for _, rt := range r.cfg.Routes {
		if r.removed[rt.Channel] {
			continue
		}
		acc += rt.Weight
		last = rt.Channel
		if point < 100*float64(acc)/float64(total) {
			return rt.Channel
		}
	}
	return last
}

// Record counts the outcome of an attempt on channel (ok: captured; not ok: failed,
// expired, or its creation failed) and takes the channel out of rotation when its success
// rate over the window stayed below the floor for RouterConfig.For (logged at warn and
// reported to OnRemoved). A channel not among the routes is ignored.
func (r *Router) Record(channel string, ok bool) {
	now := r.cfg.Now()
	r.mu.Lock()
	known := false
	for _, rt := range r.cfg.Routes {
		known = known || rt.Channel == channel
	}
	if !known || r.removed[channel] {
		r.mu.Unlock()
		return
	}
	os := append(r.outcomes[channel], outcome{at: now, ok: ok})
	cut := 0
	for cut < len(os) && now.Sub(os[cut].at) > r.cfg.Window {
		cut++
	}
	os = os[cut:]
	r.outcomes[channel] = os
	rate, counted := successRate(os, r.cfg.MinSamples)
	removed := false
	switch {
	case r.cfg.Floor <= 0 || !counted:
	case rate >= r.cfg.Floor:
		delete(r.belowSince, channel)
	default:
		since, below := r.belowSince[channel]
		if !below {
			r.belowSince[channel] = now
		} else if now.Sub(since) >= r.cfg.For {
			r.removed[channel], removed = true, true
		}
	}
	r.mu.Unlock()
	if removed {
		name, variant := orderly.SplitRoute(channel)
		r.cfg.Logger.Warn("payment channel variant taken out of rotation: its success rate stayed below the floor",
			"channel", name, "variant", variant, "success_rate", rate, "floor", r.cfg.Floor, "for", r.cfg.For)
		if r.cfg.OnRemoved != nil {
			r.cfg.OnRemoved(channel, rate)
		}
	}
}

func successRate(os []outcome, minSamples int) (float64, bool) {
	if len(os) < minSamples {
		return 0, false
	}
	n := 0
	for _, o := range os {
		if o.ok {
			n++
		}
	}
	return float64(n) / float64(len(os)), true
}

// Stat is one route's figures (Stats): a channel, or one variant of it.
type Stat struct {
	Route       string  `json:"route"`   // Route.Channel: "stripe@v2"
	Channel     string  `json:"channel"` // "stripe"
	Variant     string  `json:"variant"` // "v2"; "" for a channel routed without variants
	Weight      int     `json:"weight"`
	InRotation  bool    `json:"in_rotation"`
	Outcomes    int     `json:"outcomes"`     // in the window
	SuccessRate float64 `json:"success_rate"` // over the window; 0 without outcomes
}

// Stats returns every route's figures, in route order.
func (r *Router) Stats() []Stat {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Stat, 0, len(r.cfg.Routes))
	for _, rt := range r.cfg.Routes {
		os := r.outcomes[rt.Channel]
		rate, _ := successRate(os, 1)
		name, variant := orderly.SplitRoute(rt.Channel)
		out = append(out, Stat{Route: rt.Channel, Channel: name, Variant: variant, Weight: rt.Weight, InRotation: !r.removed[rt.Channel], Outcomes: len(os), SuccessRate: rate})
	}
	return out
}

// Deviations returns how far success rates differ among stats' routes in rotation that have
// outcomes: overall, the largest rate minus the smallest among all of them; byChannel, the
// same among the variants of each channel that has at least two such variants (a gray
// release: "stripe" → rate of stripe@v1 − rate of stripe@v2, the larger first). Rates and
// deviations are fractions, 0–1.
func Deviations(stats []Stat) (overall float64, byChannel map[string]float64) {
	type span struct{ lo, hi float64 }
	var all *span
	per := map[string]*span{}
	count := map[string]int{}
	widen := func(s *span, rate float64) *span {
		if s == nil {
			return &span{rate, rate}
		}
		s.lo, s.hi = min(s.lo, rate), max(s.hi, rate)
		return s
	}
	for _, st := range stats {
		if !st.InRotation || st.Outcomes == 0 {
			continue
		}
		all = widen(all, st.SuccessRate)
		per[st.Channel] = widen(per[st.Channel], st.SuccessRate)
		count[st.Channel]++
	}
	byChannel = map[string]float64{}
	for ch, s := range per {
		if count[ch] >= 2 {
			byChannel[ch] = s.hi - s.lo
		}
	}
	if all != nil {
		overall = all.hi - all.lo
	}
	return overall, byChannel
}

// Restore puts channel back in rotation (an operator's decision) with a fresh window.
func (r *Router) Restore(channel string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.removed, channel)
	delete(r.belowSince, channel)
	delete(r.outcomes, channel)
}
