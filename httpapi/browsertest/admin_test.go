package browsertest_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/admintest"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

// chromium returns the path of a Chromium (or Chrome) binary; the test is skipped without
// one, and fails when ORDERLY_TEST_REQUIRE_SERVICES=1 (CI installs Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("ORDERLY_TEST_REQUIRE_SERVICES") == "1" {
		t.Fatal("no chromium binary on PATH and ORDERLY_TEST_REQUIRE_SERVICES=1 (apt-get install chromium)")
	}
	t.Skip("no chromium binary on PATH (apt-get install chromium)")
	return ""
}

// TestAdminPageInBrowser loads /admin in headless Chromium from a server on a seeded
// engine (two orders awaiting payment, one cancelled, one closed 30 ms late by the timer,
// two dead letters), enters the token, checks that the page shows the seeded counts, the
// lateness and the dead letters, clicks re-drive on one and checks in the store that the
// message is pending again, then that the relay delivers it; discards the other with a
// reason typed into the page's prompt and checks the audit; shows an order's timeline. A
// screenshot of the page is saved in the test's artifact directory.
func TestAdminPageInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	g := admintest.New(t)
	g.SetStock(t, "SKU-1", 10)
	g.CreateOrder(t, enginetest.CreateOrderOpts{})
	g.CreateOrder(t, enginetest.CreateOrderOpts{})
	cancelled := g.CreateOrder(t, enginetest.CreateOrderOpts{})
	if _, err := g.Orders.CancelOrder(context.Background(), cancelled.ID, "buyer", ""); err != nil {
		t.Fatal(err)
	}
	timedOut := g.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 10})
	g.Clock.Set(timedOut.CloseAt.Add(30 * time.Millisecond)) // the timer closes it 30 ms late
	if _, err := g.Closer.CloseDue(context.Background(), "timer"); err != nil {
		t.Fatal(err)
	}
	dead := g.DeadMessage(t, "k-browser")
	doomed := g.DeadMessage(t, "k-discard")
	g.SetFailing(false) // the subscriber is back: the re-driven message is delivered

	srv := httptest.NewServer(g.H)
	t.Cleanup(srv.Close)

	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1600), chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(browser, 60*time.Second)
	defer cancel()

	row := chromedp.CSS(`#dead tr[data-message-id="` + strconv.FormatInt(dead, 10) + `"]`)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/admin"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), admintest.Token),
		chromedp.SendKeys(chromedp.ID("operator"), "browser-test"),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-count="standard/pending_payment"]`)),
		chromedp.WaitVisible(row),
	); err != nil {
		t.Fatalf("load the page and enter the token: %v", err)
	}
	text := func(sel chromedp.CSS) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	if pending, closed := text(`[data-count="standard/pending_payment"]`), text(`[data-count="standard/closed"]`); pending != "2" || closed != "2" {
		t.Errorf("page shows %q awaiting payment and %q closed, want 2 and 2 (the seed)", pending, closed)
	}
	if h := text(`#lateness [data-trigger="timer"] h3`); h != "timer: 1 close, mean 30 ms" {
		t.Errorf("lateness heading %q, want the timer's one close, 30 ms late", h)
	}
	if topic := text(row + ` td:nth-child(2)`); topic != admintest.TopicCounted {
		t.Errorf("dead letter row shows topic %q, want %q", topic, admintest.TopicCounted)
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		path := filepath.Join(t.ArtifactDir(), name)
		if err := os.WriteFile(path, png, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of /admin: %s", path)
	}
	screenshot("admin.png")

	if err := chromedp.Do(ctx,
		chromedp.Click(row+` button.redrive`),
		chromedp.WaitNotPresent(row),
	); err != nil {
		t.Fatalf("re-drive through the page: %v", err)
	}
	if status, want := text(`#status`), "Message "+strconv.FormatInt(dead, 10)+" re-driven"; !strings.HasPrefix(status, want) {
		t.Errorf("status line %q, want it to start with %q", status, want)
	}
	var msgs []*orderly.Message
	g.Read(t, func(tx store.Tx) (err error) {
		msgs, err = tx.OutboxKeyUndelivered(context.Background(), "k-browser", 10)
		return err
	})
	if len(msgs) != 1 || msgs[0].ID != dead || msgs[0].State != orderly.MessagePending || msgs[0].Attempts != 0 {
		t.Fatalf("after the re-drive the store has %+v, want message %d pending with 0 attempts", msgs, dead)
	}
	_, v := g.Do(t, "GET", "/v1/admin/actions?target="+strconv.FormatInt(dead, 10), admintest.Token, "")
	if acts, _ := v["actions"].([]any); len(acts) != 1 || acts[0].(map[string]any)["operator"] != "browser-test" {
		t.Errorf("audit of the re-drive = %v, want one action by the page's operator browser-test", v)
	}

	// Discard asks for a reason in a prompt; the test types it.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{
				Accept: ev.Type == page.DialogTypePrompt, PromptText: "retired in the browser test"})
		}
	}()
	doomedRow := chromedp.CSS(`#dead tr[data-message-id="` + strconv.FormatInt(doomed, 10) + `"]`)
	if err := chromedp.Do(ctx,
		chromedp.Click(doomedRow+` button.discard`),
		chromedp.WaitNotPresent(doomedRow),
	); err != nil {
		t.Fatalf("discard through the page: %v", err)
	}
	_, v = g.Do(t, "GET", "/v1/admin/actions?target="+strconv.FormatInt(doomed, 10), admintest.Token, "")
	if acts, _ := v["actions"].([]any); len(acts) != 1 || acts[0].(map[string]any)["action"] != "discard" ||
		acts[0].(map[string]any)["reason"] != "retired in the browser test" || acts[0].(map[string]any)["operator"] != "browser-test" {
		t.Errorf("audit of the discard = %v, want one discard by browser-test with the typed reason", v)
	}

	// One order's timeline: created, then cancelled.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("order-id"), cancelled.ID),
		chromedp.Click(chromedp.CSS(`#order-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline tbody tr:nth-child(2)`)),
	); err != nil {
		t.Fatalf("order timeline: %v", err)
	}
	if first, second := text(`#timeline tbody tr:nth-child(1) td:nth-child(4)`), text(`#timeline tbody tr:nth-child(2) td:nth-child(4)`); first != "create" || second != "cancel" {
		t.Errorf("timeline events %q, %q; want create, cancel", first, second)
	}
	screenshot("admin-after-actions.png")

	g.Drain(t)
	n := g.Delivered(dead)
	if n != 1 {
		t.Errorf("re-driven message delivered %d times, want once", n)
	}
}
