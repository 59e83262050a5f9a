package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
)

// chromium finds a Chromium or Chrome to drive, or skips the test saying
// how to get one (CI installs Debian's chromium package, so it runs there).
func chromium(t *testing.T) string {
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium to drive: install it (Debian: apt-get install chromium; .ci/run does) or set CHROMIUM to its path")
	return ""
}

// screenshot saves the page as a PNG under $SWITCHBOARD_SCREENSHOTS (CI
// keeps that directory as an artefact), when it is set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("SWITCHBOARD_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// A human in a real browser: signs in at the identity provider, sees the
// request an agent sent through the host's API, narrows the scope, reviews
// and approves it; the agent collects a credential for exactly that scope;
// the human revokes it from Connections and the agent's next call fails.
// Every control has a label, and the pages fit a 320-pixel screen.
func TestInBrowser(t *testing.T) {
	bin := chromium(t)
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	e := newEnv(t, "")
	e.signIn("alice").publish("alice-bot", "Alice's bot", true)
	e.signIn("bob").publish("bob-desk", "Bob's desk", true)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1000, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx); err != nil { // starts the browser (no timeout on this first call)
		t.Skipf("Chromium at %s did not start: %v", bin, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()

	// Sign in: the host sends the browser to the issuer's form and back.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("signin")),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("subject")),
		chromedp.SendKeys(chromedp.ID("subject"), "bob"),
		chromedp.SendKeys(chromedp.ID("name"), "Bob Example"),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("empty")),
	))
	url, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(url, "/inbox"), url)

	// An agent asks, through the host's API; the inbox shows it.
	edgeID, secret := e.friendRequest(t, "send the March invoices", twoQueues)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.ID("approvals")),
	))
	inbox, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("approvals")))
	require.NoError(t, err)
	require.Contains(t, inbox, "Alice's bot")
	require.Contains(t, inbox, "send the March invoices")
	require.Contains(t, inbox, "Alice Example")
	screenshot(t, ctx, "inbox")

	// Decide: untick inbox's read and list, review, approve.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a.decide`)),
		chromedp.WaitVisible(chromedp.ID("narrow")),
	))
	screenshot(t, ctx, "decision")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#g1\.1`)), // inbox: read
		chromedp.Click(chromedp.CSS(`#g1\.2`)), // inbox: list
		chromedp.Click(chromedp.ID("review")),
		chromedp.WaitVisible(chromedp.ID("final-scope")),
	))
	final, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("final-scope")))
	require.NoError(t, err)
	require.Contains(t, final, `queue "billing": create todos`)
	require.Contains(t, final, `queue "inbox": create todos`)
	require.NotContains(t, final, "read the todos")
	screenshot(t, ctx, "review")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("approve-button")),
		chromedp.WaitVisible(chromedp.ID("outcome")),
	))
	outcome, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("outcome")))
	require.NoError(t, err)
	require.Equal(t, "Approved", outcome)

	// The agent collects a credential for exactly the narrowed scope.
	code, out, _ := e.client().do("POST", "/edges/"+edgeID+"/collect", map[string]string{"secret": secret})
	require.Equal(t, http.StatusOK, code, out)
	cred := switchboard.Credential(out["credential"].(string))
	g, err := e.sb.Authenticate(context.Background(), cred)
	require.NoError(t, err)
	require.Equal(t, switchboard.Scope{
		{Queue: "billing", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}},
		{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}},
	}, g.Scope)
	_, _, err = e.sb.CreateFor(context.Background(), cred, "inbox", switchboard.NewTodo{Kind: "invoice", Title: "March"})
	require.NoError(t, err)
	_, err = e.sb.List(context.Background(), cred, "inbox", nil)
	require.ErrorIs(t, err, switchboard.ErrForbidden, "list was unticked")

	// Accessible basics on every page the human used: each control has a
	// label, and nothing is wider than a 320-pixel screen.
	for _, path := range []string{"/inbox", "/connections", "/connections/" + g.ID, "/history"} {
		require.NoError(t, chromedp.Do(ctx,
			chromedp.EmulateViewport(320, 640),
			chromedp.Navigate(e.srv.URL+path),
			chromedp.WaitVisible(chromedp.CSS(`main`)),
		))
		labelled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll('input:not([type=hidden]), select, textarea')].every(c => c.labels && c.labels.length > 0)`))
		require.NoError(t, err)
		fits, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= 320`))
		require.NoError(t, err)
		require.True(t, labelled, "%s: a control without a label", path)
		require.True(t, fits, "%s: wider than 320 px", path)
		if path == "/connections" {
			screenshot(t, ctx, "connections-320px")
		}
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1000, 900)))

	// Revoke from Connections; the agent's next call fails.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/connections"),
		chromedp.WaitVisible(chromedp.ID("connections")),
		chromedp.Click(chromedp.CSS(`#connections a.button`)),
		chromedp.WaitVisible(chromedp.ID("revoke")),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("revoke-button")),
		chromedp.WaitVisible(chromedp.ID("outcome")),
	))
	outcome, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("outcome")))
	require.NoError(t, err)
	require.Equal(t, "Revoked", outcome)
	_, _, err = e.sb.CreateFor(context.Background(), cred, "inbox", switchboard.NewTodo{Kind: "invoice"})
	require.ErrorIs(t, err, switchboard.ErrUnauthenticated)
}
