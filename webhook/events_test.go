package webhook_test

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/webhook"
)

// TestEventsCatchUp: a subscriber whose endpoint was down (every delivery dead) catches up
// with Events: the same events, in commit order, with the ids, topics, keys, sequences and
// data its deliveries carried, page by page from the position it kept; a position past
// the last event gives an empty page that keeps it.
func TestEventsCatchUp(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(string, int) bool { return true }) // down
	e, _, _ := setup(t, 1, rc)
	svc, err := webhook.New(webhook.Config{Store: e.Store})
	if err != nil {
		t.Fatal(err)
	}
	emit(t, e, orderly.TopicOrderClosed, "ord-1", "ord-2")
	emit(t, e, orderly.TopicOrderPaid, "ord-3")
	emit(t, e, orderly.TopicOrderClosed, "ord-3")
	drain(t, e, 3, 0)
	sent := rc.got()
	if len(sent) != 4 {
		t.Fatalf("%d deliveries tried, want 4", len(sent))
	}
	var got []*orderly.PublishedEvent
	after := ""
	for range 10 {
		page, err := svc.Events(t.Context(), &orderly.EventsQuery{After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page.Events...)
		if page.NextAfter == after {
			break
		}
		after = page.NextAfter
	}
	if len(got) != 4 {
		t.Fatalf("caught up on %d events, want 4", len(got))
	}
	byID := map[string]webhook.Envelope{}
	for _, c := range sent {
		byID[c.env.ID] = c.env
	}
	for i, ev := range got {
		d, ok := byID[ev.ID]
		if !ok || d.Topic != ev.Topic || d.Key != ev.Key || d.Sequence != ev.Sequence || !bytes.Equal(d.Data, ev.Data) {
			t.Errorf("event %d = %+v (data %s), want the delivery %+v (data %s)", i, ev, ev.Data, d, d.Data)
		}
	}
	if got[0].Key != "ord-1" || got[1].Key != "ord-2" || got[2].Topic != orderly.TopicOrderPaid || got[3].Sequence != 2 {
		t.Errorf("order of the events: %s %s, %s %s, %s %s, %s #%d; want ord-1, ord-2, ord-3 paid then closed #2",
			got[0].Key, got[0].Topic, got[1].Key, got[1].Topic, got[2].Key, got[2].Topic, got[3].Key, got[3].Sequence)
	}
	page, err := svc.Events(t.Context(), &orderly.EventsQuery{OrderID: "ord-3", Topic: orderly.TopicOrderClosed, Limit: 10})
	if err != nil || len(page.Events) != 1 || page.Events[0].ID != got[3].ID {
		t.Errorf("ord-3's order.closed = %+v, %v; want the last event", page, err)
	}
	if _, err := strconv.ParseInt(after, 10, 64); err != nil {
		t.Errorf("next_after %q is not a position", after)
	}
}
