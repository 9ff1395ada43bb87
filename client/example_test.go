package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/orderlyhq/orderly/client"
)

// A shop creates an order for a cart, starts its payment, and later catches up on the
// events its webhook endpoint missed. Errors are problem documents (RFC 9457) in the
// response's ApplicationproblemJSON<status> member.
func ExampleNewClientWithResponses() {
	ctx := context.Background()
	c, err := client.NewClientWithResponses("http://127.0.0.1:8080", client.WithBearerToken("an API key"))
	if err != nil {
		log.Fatal(err)
	}
	created, err := c.CreateOrderWithResponse(ctx, &client.CreateOrderParams{IdempotencyKey: client.Ptr("checkout-42")},
		client.CreateOrderJSONRequestBody{
			UserId: "u-1", Currency: "USD",
			Items:    []client.Item{{Sku: "TSHIRT-M", Quantity: 2, UnitPrice: 1500}}, // minor units
			Metadata: &client.Metadata{"cart_id": "cart-42"},
		})
	switch {
	case err != nil:
		log.Fatal(err) // the server could not be reached
	case created.ApplicationproblemJSON409 != nil:
		log.Fatalf("refused: %s", created.ApplicationproblemJSON409.Type) // …/out-of-stock, …/coupon-unavailable
	case created.JSON201 == nil && created.JSON200 == nil:
		log.Fatalf("create answered %d: %s", created.StatusCode(), created.Body)
	}
	order := created.JSON201
	if order == nil {
		order = created.JSON200 // a retry of the same Idempotency-Key: the first order
	}
	pay, err := c.StartPaymentWithResponse(ctx, order.Id, nil, client.StartPaymentJSONRequestBody{})
	if err != nil {
		log.Fatal(err)
	} else if pay.JSON201 == nil {
		log.Fatalf("start payment answered %d: %s", pay.StatusCode(), pay.Body)
	}
	fmt.Println("pay", pay.JSON201.Amount, pay.JSON201.Currency, "before", order.ExpiresAt)

	// Catch up from the last position kept (none the first time).
	var after *string
	for {
		page, err := c.ListEventsWithResponse(ctx, &client.ListEventsParams{After: after})
		if err != nil {
			log.Fatal(err)
		} else if page.JSON200 == nil {
			log.Fatalf("events answered %d: %s", page.StatusCode(), page.Body)
		}
		if len(page.JSON200.Events) == 0 {
			break
		}
		for _, ev := range page.JSON200.Events {
			fmt.Println(ev.Topic, ev.Key, ev.Sequence, ev.Data["metadata"])
		}
		after = &page.JSON200.NextAfter
	}
}
