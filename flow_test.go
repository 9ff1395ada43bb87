package orderly_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/orderlyhq/orderly"
)

func TestStandardFlow(t *testing.T) {
	t.Parallel()
	flow := orderly.StandardFlow
	legal := map[orderly.State]map[orderly.Event]orderly.State{
		orderly.StatePendingPayment: {
			orderly.EventPay:     orderly.StatePaid,
			orderly.EventTimeout: orderly.StateClosed,
			orderly.EventCancel:  orderly.StateClosed,
		},
		orderly.StatePaid: {
			orderly.EventShip:          orderly.StateShipped,
			orderly.EventRefund:        orderly.StateRefunding,
			orderly.EventPartialRefund: orderly.StatePaid,
		},
		orderly.StateShipped: {
			orderly.EventComplete:      orderly.StateCompleted,
			orderly.EventRefund:        orderly.StateRefunding,
			orderly.EventPartialRefund: orderly.StateShipped,
		},
		// A completed order is done shipping, but a return may still refund it.
		orderly.StateCompleted: {
			orderly.EventRefund:        orderly.StateRefunding,
			orderly.EventPartialRefund: orderly.StateCompleted,
		},
		orderly.StateRefunding: {
			orderly.EventRefundComplete: orderly.StateRefunded,
			orderly.EventPartialRefund:  orderly.StateRefunding,
		},
	}
	states := []orderly.State{
		orderly.StatePendingPayment, orderly.StatePaid, orderly.StateShipped, orderly.StateCompleted,
		orderly.StateClosed, orderly.StateRefunding, orderly.StateRefunded,
	}
	events := []orderly.Event{
		orderly.EventPay, orderly.EventTimeout, orderly.EventCancel, orderly.EventShip,
		orderly.EventComplete, orderly.EventRefund, orderly.EventRefundComplete, orderly.EventPartialRefund,
	}
	if got := flow.States(); len(got) != len(states) {
		t.Fatalf("States() = %v, want the %d states %v", got, len(states), states)
	}
	// Every (state, event) pair: legal ones go where the table says, all others are
	// rejected with EILLEGAL.
	for _, from := range states {
		for _, ev := range events {
			to, err := flow.Next(from, ev)
			want, ok := legal[from][ev]
			switch {
			case ok && (err != nil || to != want):
				t.Errorf("Next(%s, %s) = %q, %v; want %s", from, ev, to, err, want)
			case !ok && orderly.ErrorCode(err) != orderly.EILLEGAL:
				t.Errorf("Next(%s, %s) = %q, %v; want an %s error", from, ev, to, err, orderly.EILLEGAL)
			case !ok && to != "":
				t.Errorf("Next(%s, %s) returned state %q with its error", from, ev, to)
			}
		}
	}
	for _, s := range states {
		_, hasExit := legal[s]
		if got := flow.Terminal(s); got == hasExit {
			t.Errorf("Terminal(%s) = %v, want %v", s, got, !hasExit)
		}
	}
	for _, s := range []orderly.State{orderly.StateClosed, orderly.StateRefunded} {
		if !flow.Terminal(s) {
			t.Errorf("%s must be terminal", s)
		}
	}
}

func TestFlowsGet(t *testing.T) {
	t.Parallel()
	flows := orderly.DefaultFlows()
	if f, err := flows.Get(orderly.FlowStandard); err != nil || f != orderly.StandardFlow {
		t.Fatalf("Get(standard) = %v, %v", f, err)
	}
	if _, err := flows.Get("group_buy"); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("Get(group_buy) error = %v, want %s", err, orderly.EINVALID)
	}
}

func TestErrorCode(t *testing.T) {
	t.Parallel()
	err := orderly.Errorf(orderly.EOUTOFSTOCK, "sku %s", "A")
	if orderly.ErrorCode(err) != orderly.EOUTOFSTOCK || orderly.ErrorMessage(err) != "sku A" {
		t.Fatalf("code/message = %q/%q", orderly.ErrorCode(err), orderly.ErrorMessage(err))
	}
	wrapped := fmtErr(err)
	if orderly.ErrorCode(wrapped) != orderly.EOUTOFSTOCK {
		t.Fatalf("wrapped code = %q", orderly.ErrorCode(wrapped))
	}
	if orderly.ErrorCode(errPlain) != orderly.EINTERNAL || orderly.ErrorMessage(errPlain) != "Internal error." {
		t.Fatalf("plain error code/message = %q/%q", orderly.ErrorCode(errPlain), orderly.ErrorMessage(errPlain))
	}
	if orderly.ErrorCode(nil) != "" {
		t.Fatal("nil error has a code")
	}
}

var errPlain = errors.New("driver exploded: password=hunter2")

func fmtErr(err error) error { return fmt.Errorf("context: %w", err) }
