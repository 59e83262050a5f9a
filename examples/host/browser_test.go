package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/switchboardhq/switchboard/switchboardtest"
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
	switchboardtest.Skip(t, "no Chromium to drive: install it (Debian: apt-get install chromium; .ci/run does) or set CHROMIUM to its path")
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
		switchboardtest.Skip(t, "Chromium at %s did not start: %v", bin, err)
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
	daveWords := []string{"Dave Example", "dave@example.com", "Dave's bookkeeping", "I send the monthly invoices", "dave-books", `"inbox"`}
	isolated(t, ctx, "decide", daveWords...)
	screenshot(t, ctx, "decision")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#g1\.1`)), // inbox: read
		chromedp.Click(chromedp.CSS(`#g1\.2`)), // inbox: list
		chromedp.Click(chromedp.ID("review")),
		chromedp.WaitVisible(chromedp.ID("final-scope")),
	))
	final, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("final-scope")))
	require.NoError(t, err)
	require.Contains(t, final, `create todos in "billing"`)
	require.Contains(t, final, `create todos in "inbox"`)
	require.NotContains(t, final, "read the todos")
	isolated(t, ctx, "review", daveWords...)
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

// newBrowser starts Chromium for a test (or skips it, saying why) and
// returns a context for it with a two-minute budget.
func newBrowser(t *testing.T) context.Context {
	bin := chromium(t)
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(bctx); err != nil {
		switchboardtest.Skip(t, "Chromium at %s did not start: %v", bin, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// signInAt signs a human in through the issuer's form in the browser,
// with the claims given, and returns the page it lands on.
func signInAt(t *testing.T, ctx context.Context, base, subject, name, email string) string {
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/signin"),
		chromedp.WaitVisible(chromedp.ID("signin")),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("subject")),
		chromedp.SetValue(chromedp.ID("subject"), subject),
		chromedp.SetValue(chromedp.ID("name"), name),
		chromedp.SetValue(chromedp.ID("email"), email),
		chromedp.Submit(chromedp.ID("subject")),
		chromedp.WaitVisible(chromedp.CSS(`main`)),
	))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	return loc
}

// request sends a friend request from agent `from` (owned by subject) to
// bob-desk through the host's API, with the ID token's name and email as
// given, and returns the HTTP status, the edge id and the pickup secret.
func (e *env) request(t *testing.T, from, subject, name, email, why string, sc switchboard.Scope) (int, string, string) {
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: from, To: "bob-desk", Scope: sc, Why: why, Pickup: pickup}
	c := e.is.Claims(subject, switchboard.RequestNonce(req), time.Now())
	c.Name, c.Email, c.AMR = name, email, []string{"pwd", "otp"}
	req.IDToken = e.is.Sign(c)
	code, out, _ := e.client().do("POST", "/agents/bob-desk/friend-requests", req)
	if code != http.StatusCreated {
		return code, "", ""
	}
	return code, out["edge"].(map[string]any)["id"].(string), secret
}

// layoutOK checks the page at the current viewport: nothing wider than the
// screen, and no word broken across lines (ids in .token excepted, which
// may have to break on a narrow screen), every control labelled.
func layoutOK(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	type layout struct {
		Wide   []string `json:"wide"`
		Broken []string `json:"broken"`
		Width  int      `json:"width"`
		Screen int      `json:"screen"`
		Bare   int      `json:"bare"`
	}
	res, err := chromedp.Run(ctx, chromedp.Evaluate[layout](`(() => {
		const vw = document.documentElement.clientWidth, wide = [], broken = [];
		for (const el of document.body.querySelectorAll('*')) {
			const r = el.getBoundingClientRect();
			if (r.width > 0 && r.right > vw + 1) wide.push(el.tagName + '.' + el.className + ' ' + Math.round(r.right));
		}
		const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
		while (w.nextNode()) {
			const n = w.currentNode, el = n.parentElement;
			if (!el || el.closest('.token') || el.closest('details:not([open])') || el.closest('.skip')) continue;
			const re = /\S+/g; let m;
			while ((m = re.exec(n.data))) {
				if (m[0].length < 2) continue;
				const r = document.createRange();
				r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
				const tops = new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
				if (tops.size > 1) broken.push(m[0]);
			}
		}
		const bare = [...document.querySelectorAll('input:not([type=hidden]), select, textarea')].filter(c => !c.labels || c.labels.length === 0).length;
		return {wide, broken, width: document.documentElement.scrollWidth, screen: vw, bare};
	})()`))
	require.NoError(t, err)
	require.Empty(t, res.Wide, "%s: elements wider than the screen", what)
	require.LessOrEqual(t, res.Width, res.Screen, "%s: page wider than the screen", what)
	require.Empty(t, res.Broken, "%s: words broken across lines", what)
	require.Zero(t, res.Bare, "%s: a control without a label", what)
}

// isolated checks that every text node holding one of the outside strings
// is inside a <bdi>: no bidi character in it can reorder the page around.
func isolated(t *testing.T, ctx context.Context, what string, outside ...string) {
	t.Helper()
	b, err := json.Marshal(outside)
	require.NoError(t, err)
	bare, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
		const outside = `+string(b)+`, bare = [];
		const w = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
		while (w.nextNode()) {
			const n = w.currentNode;
			if (outside.some(o => n.data.includes(o)) && !n.parentElement.closest('bdi')) bare.push(n.data.trim());
		}
		return bare;
	})()`))
	require.NoError(t, err)
	require.Empty(t, bare, "%s: outside text not isolated", what)
}

// The consent screen a person can trust, in a real browser. Hostile
// claims (a right-to-left override, an ESC) in a requester's sub, name or
// email are refused before anything reaches the inbox, and a human whose
// own sign-in carries them is not signed in. A requester named like the
// approver with a Cyrillic letter is flagged on the page. The drain verbs
// arrive unticked and marked high risk, and the review restates each
// granted verb's sentence. Approved for one day, the grant works and then
// lapses at that end (the clock stepped past it). History, Connections and
// the decision fit 320 pixels with no word broken, and every page is
// saved as a screenshot.
func TestConsentInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	e := newEnv(t, "")
	e.signIn("bob").publish("bob-desk", "Bob's desk", true)
	e.signIn("dave").publish("dave-books", "Dave's bookkeeping", true)
	e.signIn("mallory").publish("mallory-bot", "Helpful assistant", true)

	// Hostile claims never reach a page.
	for _, c := range []struct{ sub, name, email string }{
		{"dave\u202e", "Dave", "dave@example.com"},
		{"dave", "Dave\u202eelpmaxe", "dave@example.com"},
		{"dave", "Dave\x1b[2J", "dave@example.com"},
		{"dave", "Dave", "moc.elpmaxe@\u202edave"},
	} {
		code, _, _ := e.request(t, "dave-books", c.sub, c.name, c.email, "hello", asked)
		require.NotEqual(t, http.StatusCreated, code, "%+q", c)
	}
	loc := signInAt(t, ctx, e.srv.URL, "eve\u202e", "Eve", "eve@example.com")
	require.False(t, strings.HasSuffix(loc, "/inbox"), "signed in with a bidi override in sub")
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	require.Contains(t, text, `claim "sub"`)
	require.NotContains(t, text, "\u202e")

	// Bob signs in; a look-alike of him asks, and so does Dave.
	require.True(t, strings.HasSuffix(signInAt(t, ctx, e.srv.URL, "bob", "Bob Example", "bob@example.com"), "/inbox"))
	drain := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbClaim, switchboard.VerbComplete}}}
	code, fake, _ := e.request(t, "mallory-bot", "mallory", "Bоb Example", "bob@examp1e.com", "it's me, your other account", asked) // Cyrillic о
	require.Equal(t, http.StatusCreated, code)
	code, daveEdge, daveSecret := e.request(t, "dave-books", "dave", "Dave Example", "dave@example.com", "I send the monthly invoices", drain)
	require.Equal(t, http.StatusCreated, code)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/inbox"), chromedp.WaitVisible(chromedp.ID("approvals"))))
	screenshot(t, ctx, "consent-inbox")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/inbox/"+fake), chromedp.WaitVisible(chromedp.ID("flags"))))
	flags, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("flags")))
	require.NoError(t, err)
	require.Contains(t, flags, "mixes writing systems")
	require.Contains(t, flags, `your own name "Bob Example"`)
	require.Contains(t, flags, `your own email "bob@example.com"`)
	screenshot(t, ctx, "consent-lookalike")

	// Spaces a reader cannot tell apart: an agent named with an
	// ideographic space where bob's has a plain one, a human named with
	// two spaces and a trailing no-break space. Both read on the page as
	// bob's own, and both are flagged.
	e.signIn("sly").publish("sly-bot", "Bob's\u3000desk", true)
	code, spaced, _ := e.request(t, "sly-bot", "sly", "Bob  Example\u00a0", "sly@example.com", "hello again", asked)
	require.Equal(t, http.StatusCreated, code)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/inbox/"+spaced), chromedp.WaitVisible(chromedp.ID("flags"))))
	flags, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("flags")))
	require.NoError(t, err)
	require.Contains(t, flags, `your agent "Bob's desk"`)
	require.Contains(t, flags, `your own name "Bob Example"`)
	screenshot(t, ctx, "consent-lookalike-spaces")

	// Dave's request: verified facts first, his words boxed as his; the
	// drain verbs unticked and marked.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/inbox/"+daveEdge), chromedp.WaitVisible(chromedp.ID("narrow"))))
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('main section')].map(s => s.id)`))
	require.NoError(t, err)
	require.Equal(t, []string{"verified", "their-words"}, order, "what is verified leads")
	type box struct {
		Checked bool   `json:"checked"`
		Label   string `json:"label"`
	}
	boxes, err := chromedp.Run(ctx, chromedp.Evaluate[[]box](`[...document.querySelectorAll('input[name=grant]')].map(b => ({checked: b.checked, label: b.labels[0].innerText}))`))
	require.NoError(t, err)
	require.Len(t, boxes, 3)
	for _, b := range boxes {
		high := strings.Contains(b.Label, "High risk")
		require.Equal(t, !high, b.Checked, "%q: high-risk verbs unticked, the rest ticked", b.Label)
		if strings.Contains(b.Label, "see and work on every todo") {
			require.True(t, high)
			require.Contains(t, b.Label, "whoever sent it")
		}
	}
	daveWords := []string{"Dave Example", "dave@example.com", "Dave's bookkeeping", "I send the monthly invoices", "dave-books", `"inbox"`}
	isolated(t, ctx, "decide", daveWords...)
	screenshot(t, ctx, "decision")
	for _, w := range []int{1280, 320} {
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(int64(w), 800)))
		layoutOK(t, ctx, fmt.Sprintf("decide at %d px", w))
	}
	screenshot(t, ctx, "decision-320px")
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)))

	// Tick claim too, choose one day, review: every granted verb's
	// sentence and the end are restated; approve.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`input[name=grant][value="0.0"]`)), // inbox: claim (normalized order)
		chromedp.SetValue(chromedp.ID("lifetime"), "1d"),
		chromedp.Click(chromedp.ID("review")),
		chromedp.WaitVisible(chromedp.ID("final-scope")),
	))
	final, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("final-scope")))
	require.NoError(t, err)
	require.Contains(t, final, `High risk: see and work on every todo in "inbox", whoever sent it`)
	require.Contains(t, final, `create todos in "inbox"`)
	require.NotContains(t, final, "finish the todos", "complete was left unticked")
	note, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("lifetime-note")))
	require.NoError(t, err)
	require.Contains(t, note, "1 day from now")
	isolated(t, ctx, "review", daveWords...)
	screenshot(t, ctx, "review")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("approve-button")), chromedp.WaitVisible(chromedp.ID("outcome"))))
	done, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	require.NotContains(t, done, "grant_", "ids stay behind Reference numbers")
	require.NotContains(t, done, "pickup secret")

	ed, err := e.sb.Edge(context.Background(), e.is.Human("bob"), daveEdge)
	require.NoError(t, err)
	require.Equal(t, switchboard.EdgeApproved, ed.State)
	g, err := e.sb.Connections(context.Background(), e.is.Human("bob"))
	require.NoError(t, err)
	require.Len(t, g, 1)
	require.Equal(t, switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbClaim, switchboard.VerbCreateFor}}}, g[0].Grant.Scope)
	require.WithinDuration(t, e.clock.Now().Add(24*time.Hour), g[0].Grant.ExpiresAt, time.Minute, "the grant ends in a day")

	// Connections and History read as people and sentences, and fit.
	for _, page := range []struct{ path, ready, name, want string }{
		{"/connections", "connections", "connections", "Dave Example"},
		{"/history", "events", "history", "You let Dave Example"},
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+page.path), chromedp.WaitVisible(chromedp.ID(page.ready))))
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
		require.NoError(t, err)
		require.Contains(t, text, page.want)
		isolated(t, ctx, page.path, daveWords...)
		if page.name == "connections" {
			require.Less(t, strings.Index(text, "Dave Example"), strings.Index(text, "Dave's bookkeeping"), "the person first")
		}
		screenshot(t, ctx, page.name)
		for _, w := range []int{1280, 320} {
			require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(int64(w), 800)))
			layoutOK(t, ctx, fmt.Sprintf("%s at %d px", page.path, w))
		}
		screenshot(t, ctx, page.name+"-320px")
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)))
	}

	// The grant lapses at the end chosen: a day later Dave's agent is
	// refused, and Connections no longer lists it.
	_, cred, err := e.sb.Collect(context.Background(), daveEdge, daveSecret)
	require.NoError(t, err)
	_, _, err = e.sb.CreateFor(context.Background(), cred, "inbox", switchboard.NewTodo{Kind: "invoice"})
	require.NoError(t, err)
	e.clock.Step(24*time.Hour + time.Minute)
	_, _, err = e.sb.CreateFor(context.Background(), cred, "inbox", switchboard.NewTodo{Kind: "invoice"})
	require.ErrorIs(t, err, switchboard.ErrUnauthenticated, "a day later the grant has lapsed")
	_, err = e.sb.Reap(context.Background())
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/connections"), chromedp.WaitVisible(chromedp.CSS(`main`))))
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	require.Contains(t, text, "No live grants")
}

// TestMain runs the tests, then names on stderr each test that skipped
// for want of something on this machine, and why (switchboardtest.Skip).
func TestMain(m *testing.M) { switchboardtest.Main(m) }
