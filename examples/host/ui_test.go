package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// browser is a cookie-keeping HTTP client that reads pages as a browser
// without JavaScript would.
type browser struct {
	*client
	page string // the last page's HTML
	at   string // its URL
}

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// idle sets the host's idle timeout.
func (e *env) idle(d time.Duration) {
	e.host.mu.Lock()
	e.host.cfg.IdleTimeout = d
	e.host.mu.Unlock()
}

func (e *env) browser() *browser { return &browser{client: e.client()} }

func (b *browser) get(path string) int {
	b.t.Helper()
	resp, err := b.http.Get(b.abs(path))
	require.NoError(b.t, err)
	return b.read(resp)
}

func (b *browser) post(path string, form url.Values, hdr ...string) int {
	b.t.Helper()
	req, err := http.NewRequest("POST", b.abs(path), strings.NewReader(form.Encode()))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.http.Do(req)
	require.NoError(b.t, err)
	return b.read(resp)
}

func (b *browser) abs(path string) string {
	if strings.HasPrefix(path, "http") {
		return path
	}
	return b.base + path
}

func (b *browser) read(resp *http.Response) int {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	b.page, b.at = string(raw), resp.Request.URL.String()
	return resp.StatusCode
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the token in the last page's forms.
func (b *browser) csrf() string {
	m := csrfField.FindStringSubmatch(b.page)
	require.NotNil(b.t, m, "no CSRF field on %s", b.at)
	return m[1]
}

// signInBrowser signs subject in the way a browser does: the host sends it
// to the issuer's sign-in form, the issuer back with a code, the host
// exchanges it and lands on the inbox.
func (e *env) signInBrowser(subject string) *browser {
	b := e.browser()
	require.Equal(e.t, 200, b.get("/signin/start"))
	require.Contains(e.t, b.page, `name="subject"`, "the issuer's sign-in form")
	u, err := url.Parse(b.at)
	require.NoError(e.t, err)
	form := u.Query()
	form.Set("subject", subject)
	form.Set("name", strings.ToUpper(subject[:1])+subject[1:])
	require.Equal(e.t, 200, b.post(e.is.URL()+"/auth", form))
	require.True(e.t, strings.HasSuffix(b.at, "/inbox"), "landed on %s: %s", b.at, b.page)
	return b
}

// friendRequest sends a friend request from alice-bot to bob-desk as an
// agent does, and returns its edge id and pickup secret.
func (e *env) friendRequest(t *testing.T, why string, sc switchboard.Scope) (string, string) {
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: sc, Why: why, Pickup: pickup}
	c := e.is.Claims("alice", switchboard.RequestNonce(req), time.Now())
	c.Name, c.Email, c.AMR, c.ACR = "Alice Example", "alice@example.com", []string{"pwd", "otp"}, "urn:example:mfa"
	req.IDToken = e.is.Sign(c)
	code, out, _ := e.client().do("POST", "/agents/bob-desk/friend-requests", req)
	require.Equal(t, http.StatusCreated, code, out)
	return out["edge"].(map[string]any)["id"].(string), secret
}

var twoQueues = switchboard.Scope{
	{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbGet, switchboard.VerbList}},
	{Queue: "billing", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}},
}

// The inbox, the decision with narrowing and its review, collection of
// exactly the narrowed scope, connections and revocation — through the
// pages, with forms, as a browser without JavaScript.
func TestApprovalPages(t *testing.T) {
	e := newEnv(t, "")
	e.signIn("alice").publish("alice-bot", "Alice's bot", true)
	e.signIn("bob").publish("bob-desk", "Bob's desk", true)
	bob := e.signInBrowser("bob")
	require.Contains(t, bob.page, "Nothing waits for you")

	edgeID, secret := e.friendRequest(t, "send invoices", twoQueues)
	require.Equal(t, 200, bob.get("/inbox"))
	for _, want := range []string{"Alice&#39;s bot", "Alice Example", "alice@example.com", "send invoices", `href="/inbox/` + edgeID + `"`} {
		require.Contains(t, bob.page, want)
	}

	// Narrow: keep inbox create_for and billing create_for; drop get, list.
	require.Equal(t, 200, bob.get("/inbox/"+edgeID))
	for _, want := range []string{"alice-bot", "with <bdi>pwd, otp</bdi>", "urn:example:mfa"} {
		require.Contains(t, bob.page, want)
	}
	require.Equal(t, 4, strings.Count(bob.page, `type="checkbox" name="grant"`), "one box per queue × verb")
	require.Equal(t, 4, strings.Count(bob.page, " checked>"), "every low-risk box preselected as requested")
	tok := bob.csrf()
	pick := url.Values{"csrf": {tok}, "grant": {"0.0", "1.0"}} // billing/create_for, inbox/create_for (normalized order)
	require.Equal(t, 200, bob.post("/inbox/"+edgeID+"/review", pick))
	require.Contains(t, bob.page, `id="final-scope"`)
	require.Equal(t, 2, strings.Count(bob.page, "<li><bdi>create todos in "), bob.page)
	require.NotContains(t, bob.page, "read the todos", "the review shows only what will be granted")
	require.NotContains(t, bob.page, "list the todos")

	// Without the session's token, nothing is approved.
	require.Equal(t, http.StatusForbidden, bob.post("/inbox/"+edgeID+"/approve", url.Values{"grant": {"0.0"}}))
	require.Equal(t, 200, bob.post("/inbox/"+edgeID+"/approve", pick))
	require.Contains(t, bob.page, `id="outcome">Approved`)

	_, cred, err := e.sb.Collect(context.Background(), edgeID, secret)
	require.NoError(t, err)
	g, err := e.sb.Authenticate(context.Background(), cred)
	require.NoError(t, err)
	require.Equal(t, switchboard.Scope{
		{Queue: "billing", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}},
		{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}},
	}, g.Scope, "exactly the narrowed scope")
	_, _, err = e.sb.CreateFor(context.Background(), cred, "inbox", switchboard.NewTodo{Kind: "invoice", Title: "March"})
	require.NoError(t, err)
	_, err = e.sb.List(context.Background(), cred, "inbox", nil)
	require.ErrorIs(t, err, switchboard.ErrForbidden, "list was unticked")

	// Connections: bob sees it with its outstanding todo; revokes it.
	require.Equal(t, 200, bob.get("/connections"))
	require.Contains(t, bob.page, "Alice Example")
	require.Contains(t, bob.page, "may send work to your agent")
	require.Equal(t, 200, bob.get("/connections/"+g.ID))
	require.Contains(t, bob.page, "March")
	tok = bob.csrf()
	require.Equal(t, http.StatusBadRequest, bob.post("/connections/"+g.ID+"/revoke", url.Values{"csrf": {tok}}), "not confirmed")
	require.Equal(t, 200, bob.post("/connections/"+g.ID+"/revoke", url.Values{"csrf": {tok}, "confirm": {"yes"}}))
	require.Contains(t, bob.page, "Revoked")
	_, _, err = e.sb.CreateFor(context.Background(), cred, "inbox", switchboard.NewTodo{Kind: "invoice"})
	require.ErrorIs(t, err, switchboard.ErrUnauthenticated)

	// History lists bob's approval with a downloadable proof that verifies.
	require.Equal(t, 200, bob.get("/history"))
	require.Contains(t, bob.page, "edge.approved")
	require.Contains(t, bob.page, "You let <bdi>Alice Example</bdi>&#39;s agent <bdi>Alice&#39;s bot</bdi>")
	m := regexp.MustCompile(`href="/history/proof/(\d+)"`).FindStringSubmatch(bob.page)
	require.NotNil(t, m)
	resp, err := bob.http.Get(bob.base + "/history/proof/" + m[1])
	require.NoError(t, err)
	defer resp.Body.Close()
	var got struct {
		Proof      switchboard.InclusionProof `json:"proof"`
		Checkpoint string                     `json:"checkpoint"`
		Key        string                     `json:"verifier_key"`
	}
	require.NoError(t, jsonDecode(resp.Body, &got))
	cp, err := switchboard.OpenCheckpoint([]byte(got.Checkpoint), got.Key)
	require.NoError(t, err)
	ev, err := switchboard.VerifyInclusion(cp, got.Proof)
	require.NoError(t, err)
	require.Equal(t, "human:"+e.is.URL()+"#bob", ev.Actor)

	// Sign out: the pages send the browser to sign in again.
	require.Equal(t, 200, bob.post("/signout", url.Values{"csrf": {bob.csrf()}}))
	require.True(t, strings.HasSuffix(bob.at, "/signin"), bob.at)
	require.Equal(t, 200, bob.get("/inbox"))
	require.True(t, strings.HasSuffix(bob.at, "/signin"))
}

// Deny, and deny-and-block, state their effect; a blocked requester's next
// request is refused.
func TestDenyAndBlockPage(t *testing.T) {
	e := newEnv(t, "")
	e.signIn("alice").publish("alice-bot", "Alice's bot", true)
	e.signIn("bob").publish("bob-desk", "Bob's desk", true)
	bob := e.signInBrowser("bob")
	edgeID, _ := e.friendRequest(t, "first", twoQueues)
	require.Equal(t, 200, bob.get("/inbox/"+edgeID))
	require.Equal(t, 200, bob.post("/inbox/"+edgeID+"/deny", url.Values{"csrf": {bob.csrf()}, "block": {"1"}}))
	require.Contains(t, bob.page, "You turned down the request")
	require.Contains(t, bob.page, "can no longer ask you for anything")
	secret, pickup := switchboard.NewPickup()
	_ = secret
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: twoQueues, Why: "again", Pickup: pickup}
	req.IDToken = e.is.RequestToken("alice", req, time.Now())
	code, _, _ := e.client().do("POST", "/agents/bob-desk/friend-requests", req)
	require.NotEqual(t, http.StatusCreated, code, "blocked")
	require.Equal(t, 200, bob.get("/inbox"))
	require.Contains(t, bob.page, "Nothing waits for you")
}

// Hostile requesters: markup, script and 10 KB strings in the card's name,
// the reason and the queue names are shown as text, clipped; forms from
// other sites and other humans' approval ids get nowhere.
func TestApprovalPagesAgainstHostileInput(t *testing.T) {
	e := newEnv(t, "")
	bob := e.signInBrowser("bob")
	e.signIn("bob").publish("bob-desk", "Bob's desk", true)
	alice := e.signIn("alice")
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>` + strings.Repeat("W", 10<<10)
	code, out, _ := alice.do("PUT", "/me/personas/alice-bot", map[string]any{"card": switchboard.PersonaCard(switchboard.CardFields{Name: evil[:120], Description: "x", Version: "1", URL: alice.base + "/agents/alice-bot"}), "discoverable": true})
	require.Equal(t, 200, code, out)
	why := `<b>urgent</b> <a href="https://evil.example">click</a> ` + strings.Repeat("y", 900)
	sc := switchboard.Scope{{Queue: "q<script>", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
	secret, pickup := switchboard.NewPickup()
	_ = secret
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: sc, Why: why, Pickup: pickup}
	req.IDToken = e.is.RequestToken("alice", req, time.Now())
	code, out, _ = e.client().do("POST", "/agents/bob-desk/friend-requests", req)
	var edgeID string
	if code == http.StatusCreated {
		edgeID = out["edge"].(map[string]any)["id"].(string)
	} else {
		// The library refuses such queue names: the same request with a
		// plain queue still carries the hostile name and reason.
		req.Scope = switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}
		req.IDToken = e.is.RequestToken("alice", req, time.Now())
		code, out, _ = e.client().do("POST", "/agents/bob-desk/friend-requests", req)
		require.Equal(t, http.StatusCreated, code, out)
		edgeID = out["edge"].(map[string]any)["id"].(string)
	}
	// Bidi overrides (which could make "evil.example" read as
	// "elpmaxe.live") never reach a page: the card and the request refuse
	// them.
	code, _, _ = alice.do("PUT", "/me/personas/alice-bot", map[string]any{"card": switchboard.PersonaCard(switchboard.CardFields{Name: "bank\u202etxt.exe", Description: "x", Version: "1", URL: alice.base + "/agents/alice-bot"}), "discoverable": true})
	require.Equal(t, http.StatusBadRequest, code, "a card name with U+202E")
	bidi := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: twoQueues, Why: "pay \u2067this\u2069 now", Pickup: pickup}
	bidi.IDToken = e.is.RequestToken("alice", bidi, time.Now())
	code, _, _ = e.client().do("POST", "/agents/bob-desk/friend-requests", bidi)
	require.Equal(t, http.StatusBadRequest, code, "a reason with bidi isolates")

	for _, path := range []string{"/inbox", "/inbox/" + edgeID} {
		require.Equal(t, 200, bob.get(path))
		require.NotContains(t, bob.page, "<script>alert", path)
		require.NotContains(t, bob.page, "<img", path)
		require.NotContains(t, bob.page, "<b>urgent", path)
		require.NotContains(t, bob.page, `<a href="https://evil.example"`, path)
		require.Contains(t, bob.page, "&lt;script&gt;alert(1)&lt;/script&gt;", path)
		require.NotContains(t, bob.page, strings.Repeat("W", 200), "clipped")
		require.Less(t, len(bob.page), 12<<10, "%s is %d bytes: requester text is clipped", path, len(bob.page))
	}
	// Every page forbids scripts and framing.
	resp, err := bob.http.Get(bob.base + "/inbox")
	require.NoError(t, err)
	resp.Body.Close()
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")

	// A cross-site form POST with the session cookie is refused before
	// any route, token or not.
	require.Equal(t, 200, bob.get("/inbox/"+edgeID))
	tok := bob.csrf()
	require.Equal(t, http.StatusForbidden, bob.post("/inbox/"+edgeID+"/approve", url.Values{"csrf": {tok}, "grant": {"0.0"}}, "Sec-Fetch-Site", "cross-site"))
	require.Equal(t, http.StatusForbidden, bob.post("/inbox/"+edgeID+"/approve", url.Values{"csrf": {tok}, "grant": {"0.0"}}, "Origin", "https://evil.example"))
	// Carol, signed in, cannot see or decide bob's approval.
	carol := e.signInBrowser("carol")
	require.Equal(t, http.StatusNotFound, carol.get("/inbox/"+edgeID))
	require.Equal(t, http.StatusNotFound, carol.post("/inbox/"+edgeID+"/approve", url.Values{"csrf": {carol.csrf()}, "grant": {"0.0"}}))
	ed, err := e.sb.Edge(context.Background(), e.is.Human("bob"), edgeID)
	require.NoError(t, err)
	require.Equal(t, switchboard.EdgePending, ed.State, "nothing decided it")
}

// A session unused for longer than the idle timeout is over.
func TestSessionIdleTimeout(t *testing.T) {
	e := newEnv(t, "")
	b := e.signInBrowser("bob")
	e.idle(time.Millisecond)
	time.Sleep(20 * time.Millisecond) // well past the idle timeout
	require.Equal(t, 200, b.get("/inbox"))
	require.True(t, strings.HasSuffix(b.at, "/signin"), "idle session still open: %s", b.at)
}

// With -dev, the inbox offers a sample friend request: the signed-in human
// gets a pending request from Sam Sample's agent to theirs (published for
// them if needed), with a high-risk verb to weigh. Without -dev there is
// no such route.
func TestDevSampleRequest(t *testing.T) {
	e := newEnvWith(t, "", envOpts{host: func(c *hostConfig, is *switchboardtest.Issuer) { c.Dev = is }})
	bob := e.signInBrowser("bob")
	require.Contains(t, bob.page, `id="sample"`)
	require.Equal(t, 200, bob.post("/dev/sample-request", url.Values{"csrf": {bob.csrf()}, "to": {"bob-desk"}}))
	require.True(t, strings.HasSuffix(bob.at, "/inbox"), bob.at)
	require.Contains(t, bob.page, "Sam Sample")
	aps, err := e.sb.Approvals(context.Background(), e.is.Human("bob"))
	require.NoError(t, err)
	require.Len(t, aps, 1)
	require.Equal(t, "bob-desk", aps[0].Approval.To)
	require.Equal(t, 200, bob.get("/inbox/"+aps[0].Approval.EdgeID))
	require.Contains(t, bob.page, "High risk")

	plain := newEnv(t, "")
	b := plain.signInBrowser("bob")
	require.NotContains(t, b.page, `id="sample"`)
	require.Equal(t, http.StatusNotFound, b.post("/dev/sample-request", url.Values{"csrf": {b.csrf()}, "to": {"bob-desk"}}))
}
