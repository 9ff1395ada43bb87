package httpapi_test

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

	"github.com/chromedp/chromedp"

	"github.com/orderlyhq/orderly"
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
// engine (two orders awaiting payment, one cancelled, one dead letter), enters the token,
// checks that the page shows the seeded counts and the dead letter, clicks its re-drive
// button and checks in the store that the message is pending again, then that the relay
// delivers it. A screenshot of the page is saved in the test's artifact directory.
func TestAdminPageInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	g := newAdminEngine(t)
	g.SetStock(t, "SKU-1", 10)
	g.CreateOrder(t, enginetest.CreateOrderOpts{})
	g.CreateOrder(t, enginetest.CreateOrderOpts{})
	cancelled := g.CreateOrder(t, enginetest.CreateOrderOpts{})
	if _, err := g.Orders.CancelOrder(context.Background(), cancelled.ID, "buyer", ""); err != nil {
		t.Fatal(err)
	}
	dead := g.deadMessage(t, "k-browser")
	g.mu.Lock()
	g.failing = false // the subscriber is back: the re-driven message is delivered
	g.mu.Unlock()

	srv := httptest.NewServer(g.h)
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
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
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
	if pending, closed := text(`[data-count="standard/pending_payment"]`), text(`[data-count="standard/closed"]`); pending != "2" || closed != "1" {
		t.Errorf("page shows %q awaiting payment and %q closed, want 2 and 1 (the seed)", pending, closed)
	}
	if topic := text(row + ` td:nth-child(2)`); topic != topicCounted {
		t.Errorf("dead letter row shows topic %q, want %q", topic, topicCounted)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.ArtifactDir(), "admin.png")
	if err := os.WriteFile(shot, png, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of /admin: %s", shot)

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
	_, v := g.do(t, "GET", "/v1/admin/actions?target="+strconv.FormatInt(dead, 10), adminToken, "")
	if acts, _ := v["actions"].([]any); len(acts) != 1 || acts[0].(map[string]any)["operator"] != "browser-test" {
		t.Errorf("audit of the re-drive = %v, want one action by the page's operator browser-test", v)
	}
	g.Drain(t)
	g.mu.Lock()
	n := g.delivered[dead]
	g.mu.Unlock()
	if n != 1 {
		t.Errorf("re-driven message delivered %d times, want once", n)
	}
}
