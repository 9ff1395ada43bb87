package outbox

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// NewMessage builds an outbox row to insert in the caller's transaction. payload is
// marshalled to JSON; an error means payload is not JSON-marshalable.
func NewMessage(topic, key string, payload any, now time.Time) (*store.OutboxInsertParams, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("outbox %s payload: %w", topic, err)
	}
	return &store.OutboxInsertParams{Topic: topic, Key: key, Payload: b, Now: now}, nil
}
