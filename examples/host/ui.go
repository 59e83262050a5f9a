// The human's side in a browser: sign-in through the host's OIDC issuer,
// the approvals inbox, the decision with narrowing, connections with
// revocation, and the audit history with signed checkpoints and proofs.
// Server-rendered with html/template; no JavaScript.

package main

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

//go:embed ui/*.html ui/ui.css
var uiFiles embed.FS

// SignIn configures the browser sign-in: the authorization code flow with
// PKCE at the host's OIDC issuer.
type SignIn struct {
	Issuer       string // the issuer URL (one of the Switchboard's issuers)
	ClientID     string
	ClientSecret string // empty for a public client (PKCE only)
	RedirectURL  string // this host's /signin/callback, as the issuer knows it
	// AuthURL and TokenURL, if set, are the issuer's endpoints, used as
	// they are instead of discovered at start (the -dev issuer, which
	// this host itself serves, cannot be asked before it listens).
	AuthURL, TokenURL string
}

// ui is the browser side of the host.
type ui struct {
	h     *host
	pages map[string]*template.Template
	oauth *oauth2.Config // nil: browser sign-in not configured
}

// uiFuncs are the template helpers. Requester-controlled text goes through
// clip: html/template escapes it, clip bounds it.
var uiFuncs = template.FuncMap{
	"clip": clip,
	"ago":  ago,
	// when is a time as a <time> element, which the stylesheet keeps on
	// one line (a date never breaks at its hyphens).
	"when": func(t time.Time) template.HTML {
		if t.IsZero() {
			return "never"
		}
		return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339) + `">` + t.UTC().Format("2006-01-02 15:04 UTC") + `</time>`)
	},
	"verb": func(v switchboard.Verb) string { return v.Describe() },
	// sentence is what a verb lets the holder do, naming the queue.
	"sentence": func(v switchboard.Verb, queue string) string { return v.DescribeIn(clip(60, queue)) },
	"high":     func(v switchboard.Verb) bool { return v.Risk() == switchboard.RiskHigh },
	"join":     strings.Join,
	"human":    humanLabel,
	// out shows outside text — anything a requester, an agent or an
	// identity provider chose — isolated (<bdi>: no bidi character in it
	// reorders what surrounds it), clipped to n characters, as text.
	"out": func(n int, s string) template.HTML {
		return template.HTML("<bdi>" + template.HTMLEscapeString(clip(n, s)) + "</bdi>")
	},
	"person": person,
	// origin is where a card says its agent is: the host of its first
	// interface's URL.
	"origin": func(c agentcard.Card) string {
		if len(c.SupportedInterfaces) == 0 {
			return ""
		}
		if u, err := url.Parse(c.SupportedInterfaces[0].URL); err == nil && u.Host != "" {
			return u.Host
		}
		return ""
	},
}

// clip shortens s to n characters, marking the cut: no requester can fill
// the screen (a 10 KB name shows as its first n characters and "…").
func clip(n int, s string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

func ago(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

func humanLabel(h switchboard.Human) string { return h.Subject + " at " + h.Issuer }

// person is how a page names the human behind an attested identity: the
// name the identity provider gave, else the account name.
func person(a switchboard.Attested) string {
	if a.Name != "" {
		return a.Name
	}
	return a.Subject
}

func newUI(h *host, si *SignIn) (*ui, error) {
	u := &ui{h: h, pages: map[string]*template.Template{}}
	for _, p := range []string{"signin", "inbox", "decide", "review", "done", "connections", "connection", "history", "error"} {
		t, err := template.New("layout.html").Funcs(uiFuncs).ParseFS(uiFiles, "ui/layout.html", "ui/"+p+".html")
		if err != nil {
			return nil, err
		}
		u.pages[p] = t
	}
	if si != nil && si.AuthURL != "" {
		u.oauth = &oauth2.Config{ClientID: si.ClientID, ClientSecret: si.ClientSecret, Endpoint: oauth2.Endpoint{AuthURL: si.AuthURL, TokenURL: si.TokenURL},
			RedirectURL: si.RedirectURL, Scopes: []string{oidc.ScopeOpenID, "profile", "email"}}
	} else if si != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := oidc.NewProvider(ctx, si.Issuer)
		if err != nil {
			return nil, fmt.Errorf("sign-in issuer %s: %w", si.Issuer, err)
		}
		u.oauth = &oauth2.Config{ClientID: si.ClientID, ClientSecret: si.ClientSecret, Endpoint: p.Endpoint(),
			RedirectURL: si.RedirectURL, Scopes: []string{oidc.ScopeOpenID, "profile", "email"}}
	}
	return u, nil
}

func (u *ui) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "public, max-age=300")
		b, _ := uiFiles.ReadFile("ui/ui.css")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := u.h.session(w, r); ok {
			http.Redirect(w, r, "/inbox", http.StatusSeeOther)
			return
		}
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /signin", u.signInPage)
	mux.HandleFunc("GET /signin/start", u.signInStart)
	mux.HandleFunc("GET /signin/callback", u.signInCallback)
	mux.HandleFunc("POST /signout", u.page(u.signOut))
	mux.HandleFunc("GET /inbox", u.page(u.inbox))
	mux.HandleFunc("GET /inbox/{edge}", u.page(u.decide))
	mux.HandleFunc("POST /inbox/{edge}/review", u.page(u.review))
	mux.HandleFunc("POST /inbox/{edge}/approve", u.page(u.approve))
	mux.HandleFunc("POST /inbox/{edge}/deny", u.page(u.deny))
	mux.HandleFunc("GET /connections", u.page(u.connections))
	mux.HandleFunc("GET /connections/{grant}", u.page(u.connection))
	mux.HandleFunc("POST /connections/{grant}/revoke", u.page(u.revoke))
	mux.HandleFunc("GET /history", u.page(u.history))
	mux.HandleFunc("GET /history/checkpoint", u.page(u.checkpoint))
	mux.HandleFunc("GET /history/proof/{seq}", u.page(u.proof))
	if u.h.cfg.Dev != nil {
		mux.HandleFunc("POST /dev/sample-request", u.page(u.sampleRequest))
	}
}

// sampleRequest (-dev only) puts a pending friend request in the signed-in
// human's inbox, so they can try the decision without an agent of their
// own: Sam Sample's agent (a dev-issuer human, a fresh persona each time)
// asks their agent (the form's "to", published for them if it does not
// exist) for create_for and claim on inbox.
func (u *ui) sampleRequest(w http.ResponseWriter, r *http.Request, me *session) {
	ctx, sb := r.Context(), u.h.cfg.SB
	to := strings.TrimSpace(r.PostForm.Get("to"))
	if to == "" {
		u.fail(w, me, fmt.Errorf("%w: name your agent (its id) to receive the request", switchboard.ErrInvalidArgument))
		return
	}
	if _, err := sb.Lookup(ctx, to); errors.Is(err, switchboard.ErrNotFound) {
		if _, err := sb.Publish(ctx, switchboard.Persona{ID: to, Owner: me.human, Discoverable: true,
			Card: switchboard.PersonaCard(switchboard.CardFields{Name: me.Name() + "'s agent", Description: "Takes work for " + me.Name(), Version: "1.0", URL: strings.TrimSuffix(u.h.cfg.BaseURL, "/") + "/agents/" + to + "/"})}); err != nil {
			u.fail(w, me, err)
			return
		}
	}
	sam := u.h.cfg.Dev.Human("sam")
	from := "sam-sample-" + randomToken()[:8]
	if _, err := sb.Publish(ctx, switchboard.Persona{ID: from, Owner: sam, Discoverable: true,
		Card: switchboard.PersonaCard(switchboard.CardFields{Name: "Sam's sample agent", Description: "A sample agent the -dev host makes so you can try a decision", Version: "1.0", URL: strings.TrimSuffix(u.h.cfg.BaseURL, "/") + "/agents/" + from + "/"})}); err != nil {
		u.fail(w, me, err)
		return
	}
	secret, pickup := switchboard.NewPickup()
	_ = secret // nobody collects: the sample only shows the decision
	req := switchboard.FriendRequest{From: from, To: to, Why: "A sample request from the -dev host: try approving, narrowing or denying it.", Pickup: pickup,
		Scope: switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbClaim}}}}
	req.IDToken = u.h.cfg.Dev.Token(switchboardtest.Login{Subject: sam.Subject, Name: "Sam Sample", Email: "sam@dev.example", Nonce: switchboard.RequestNonce(req), At: time.Now()})
	if _, _, err := sb.Request(ctx, req); err != nil {
		u.fail(w, me, err)
		return
	}
	http.Redirect(w, r, "/inbox", http.StatusSeeOther)
}

// view is what every page gets.
type view struct {
	Title string
	Me    *session
	CSRF  string
	Data  any
	Dev   bool // the host runs with -dev: the pages offer its helpers
}

// render writes a page with the headers every page carries: no framing,
// no scripts, nothing from elsewhere, no caching of personal pages.
func (u *ui) render(w http.ResponseWriter, status int, page string, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self' "+u.formTargets()+"; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if v.Me != nil {
		v.CSRF = v.Me.csrf
	}
	v.Dev = u.h.cfg.Dev != nil
	if err := u.pages[page].Execute(w, v); err != nil {
		u.h.cfg.Logger.Error("render", "page", page, "err", err)
	}
}

// formTargets is where forms may go besides this origin: the issuer's
// sign-in, reached by a redirect from /signin/start.
func (u *ui) formTargets() string {
	if u.oauth == nil {
		return ""
	}
	if p, err := url.Parse(u.oauth.Endpoint.AuthURL); err == nil {
		return p.Scheme + "://" + p.Host
	}
	return ""
}

func (u *ui) fail(w http.ResponseWriter, me *session, err error) {
	st := switchboard.StatusOf(err)
	u.render(w, st.HTTP, "error", view{Title: "Something went wrong", Me: me, Data: map[string]any{"Status": st.HTTP, "Code": st.Code, "Message": err.Error()}})
}

// page wraps a route for a signed-in human: without a session the browser
// goes to sign in; a POST must carry the session's CSRF token (on top of
// the cross-origin check every state-changing request passes first).
func (u *ui) page(fn func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := u.h.session(w, r)
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/signin", http.StatusSeeOther)
				return
			}
			u.render(w, http.StatusUnauthorized, "error", view{Title: "Signed out", Data: map[string]any{"Status": 401, "Code": "unauthenticated", "Message": "Your session ended. Sign in again."}})
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if err := r.ParseForm(); err != nil || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
				u.render(w, http.StatusForbidden, "error", view{Title: "Refused", Me: &s, Data: map[string]any{"Status": 403, "Code": "csrf", "Message": "The form was not this session's. Go back, reload and try again."}})
				return
			}
		}
		fn(w, r, &s)
	}
}

// ---- sign-in

func (u *ui) signInPage(w http.ResponseWriter, r *http.Request) {
	issuer := ""
	if u.oauth != nil {
		issuer = u.oauth.Endpoint.AuthURL
	}
	u.render(w, http.StatusOK, "signin", view{Title: "Sign in", Data: map[string]any{"Configured": u.oauth != nil, "Issuer": issuer}})
}

// signInStart sends the browser to the issuer with a fresh state, nonce and
// PKCE verifier, remembered under the hash of a cookie only this browser
// has (SameSite=Lax: it comes back with the issuer's redirect).
func (u *ui) signInStart(w http.ResponseWriter, r *http.Request) {
	if u.oauth == nil {
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	id, state, nonce, verifier := randomToken(), randomToken(), randomToken(), oauth2.GenerateVerifier()
	u.h.mu.Lock()
	now := time.Now()
	for k, l := range u.h.logins {
		if now.After(l.expires) {
			delete(u.h.logins, k)
		}
	}
	u.h.logins[hashKey(id)] = login{nonce: nonce, state: state, verifier: verifier, expires: now.Add(10 * time.Minute)}
	u.h.mu.Unlock()
	setCookie(w, r, "sb_signin", id, 10*time.Minute)
	http.Redirect(w, r, u.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

// signInCallback finishes the sign-in: the state must be this browser's,
// the code is exchanged with the PKCE verifier, and switchboard verifies
// the ID token (issuer, audience, freshness, this sign-in's nonce).
func (u *ui) signInCallback(w http.ResponseWriter, r *http.Request) {
	bad := func(msg string) {
		u.render(w, http.StatusUnauthorized, "error", view{Title: "Sign-in failed", Data: map[string]any{"Status": 401, "Code": "unauthenticated", "Message": msg}})
	}
	c, err := r.Cookie("sb_signin")
	if err != nil || u.oauth == nil {
		bad("This sign-in was not started in this browser. Start again.")
		return
	}
	u.h.mu.Lock()
	l, ok := u.h.logins[hashKey(c.Value)]
	delete(u.h.logins, hashKey(c.Value))
	u.h.mu.Unlock()
	setCookie(w, r, "sb_signin", "", -time.Second)
	q := r.URL.Query()
	if !ok || time.Now().After(l.expires) || l.state == "" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(l.state)) != 1 {
		bad("The sign-in expired or was not this browser's. Start again.")
		return
	}
	if e := q.Get("error"); e != "" {
		bad("The identity provider refused: " + clip(200, e))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	tok, err := u.oauth.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(l.verifier))
	if err != nil {
		bad("The identity provider did not accept the sign-in.")
		return
	}
	idToken, _ := tok.Extra("id_token").(string)
	prov, err := u.h.cfg.SB.VerifyHuman(ctx, idToken, l.nonce)
	if err != nil {
		bad("The identity token did not verify: " + err.Error())
		return
	}
	u.h.newSession(w, r, prov)
	http.Redirect(w, r, "/inbox", http.StatusSeeOther)
}

func (u *ui) signOut(w http.ResponseWriter, r *http.Request, _ *session) {
	u.h.endSession(w, r)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// ---- inbox and decisions

func (u *ui) inbox(w http.ResponseWriter, r *http.Request, me *session) {
	todos, err := u.h.cfg.SB.Approvals(r.Context(), me.human)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	var items []switchboard.Approval
	created := map[string]time.Time{}
	for _, t := range todos {
		if t.Approval != nil {
			items = append(items, withOwnNames(*t.Approval, me))
			created[t.Approval.EdgeID] = t.CreatedAt
		}
	}
	slices.SortStableFunc(items, func(a, b switchboard.Approval) int { return created[b.EdgeID].Compare(created[a.EdgeID]) })
	type row struct {
		switchboard.Approval
		Asked time.Time
	}
	rows := make([]row, len(items))
	for i, a := range items {
		rows[i] = row{a, created[a.EdgeID]}
	}
	u.render(w, http.StatusOK, "inbox", view{Title: "Approvals", Me: me, Data: rows})
}

// withOwnNames adds to a's flags the look-alikes of the signed-in human's
// own verified name and email, which only the host knows.
func withOwnNames(a switchboard.Approval, me *session) switchboard.Approval {
	a.Flags = append(slices.Clone(a.Flags), a.Lookalikes(me.human, "your own name", me.name)...)
	a.Flags = append(a.Flags, a.Lookalikes(me.human, "your own email", me.email)...)
	return a
}

// pending finds the human's pending approval for an edge: another human's
// edge, or one decided already, is not found.
func (u *ui) pending(r *http.Request, me *session) (switchboard.Approval, error) {
	todos, err := u.h.cfg.SB.Approvals(r.Context(), me.human)
	if err != nil {
		return switchboard.Approval{}, err
	}
	for _, t := range todos {
		if t.Approval != nil && t.Approval.EdgeID == r.PathValue("edge") {
			return withOwnNames(*t.Approval, me), nil
		}
	}
	return switchboard.Approval{}, fmt.Errorf("%w: approval", switchboard.ErrNotFound)
}

// choice is one queue × verb checkbox of the decision page.
type choice struct {
	Key     string // "i.j": scope entry i, verb j of the request
	Queue   string
	Verb    switchboard.Verb
	Checked bool
}

// lifetimes are the grant lifetimes the decision page offers, by form
// value; "" is the default.
var lifetimes = []struct {
	Value, Label string
	For          time.Duration // 0: no end
}{
	{"1d", "1 day", 24 * time.Hour},
	{"7d", "7 days", 7 * 24 * time.Hour},
	{"30d", "30 days", 30 * 24 * time.Hour},
	{"365d", "a year", 365 * 24 * time.Hour},
	{"none", "until I revoke it", 0},
}

// defaultLifetime is the lifetime preselected.
const defaultLifetime = "30d"

// lifetime reads the form's lifetime: the grant's end from now (zero: no
// end) and its label.
func lifetime(form url.Values, now time.Time) (time.Time, string, string, error) {
	v := form.Get("lifetime")
	if v == "" {
		v = defaultLifetime
	}
	for _, l := range lifetimes {
		if l.Value == v {
			if l.For == 0 {
				return time.Time{}, l.Value, l.Label, nil
			}
			return now.Add(l.For), l.Value, l.Label, nil
		}
	}
	return time.Time{}, "", "", fmt.Errorf("%w: unknown lifetime", switchboard.ErrInvalidArgument)
}

// choices lists the request's queue × verb pairs, checked as in form —
// when form is nil (the first showing), the low-risk verbs only: a verb
// that reaches every todo of a queue is given only by a deliberate tick.
func choices(a switchboard.Approval, form url.Values) [][]choice {
	var out [][]choice
	picked := map[string]bool{}
	for _, k := range form["grant"] {
		picked[k] = true
	}
	for i, e := range a.Scope {
		var row []choice
		for j, v := range e.Verbs {
			k := fmt.Sprintf("%d.%d", i, j)
			row = append(row, choice{Key: k, Queue: e.Queue, Verb: v, Checked: (form == nil && v.Risk() == switchboard.RiskLow) || picked[k]})
		}
		out = append(out, row)
	}
	return out
}

// narrowed is the scope the form's checkboxes select from the request.
func narrowed(a switchboard.Approval, form url.Values) switchboard.Scope {
	var sc switchboard.Scope
	for _, row := range choices(a, form) {
		var verbs []switchboard.Verb
		for _, c := range row {
			if c.Checked {
				verbs = append(verbs, c.Verb)
			}
		}
		if len(verbs) > 0 {
			sc = append(sc, switchboard.ScopeEntry{Queue: row[0].Queue, Verbs: verbs})
		}
	}
	return sc
}

func (u *ui) decide(w http.ResponseWriter, r *http.Request, me *session) {
	a, err := u.pending(r, me)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	u.render(w, http.StatusOK, "decide", view{Title: "Decide", Me: me, Data: map[string]any{"A": a, "Choices": choices(a, nil),
		"Lifetimes": lifetimes, "Lifetime": defaultLifetime}})
}

// granted is one verb a review or an outcome restates: the queue, the verb
// and its weight.
type granted struct {
	Queue string
	Verb  switchboard.Verb
}

func grantedOf(sc switchboard.Scope) []granted {
	var out []granted
	for _, e := range sc {
		for _, v := range e.Verbs {
			out = append(out, granted{e.Queue, v})
		}
	}
	return out
}

// review shows the scope that approving would grant, before it is granted.
func (u *ui) review(w http.ResponseWriter, r *http.Request, me *session) {
	a, err := u.pending(r, me)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	sc := narrowed(a, r.PostForm)
	end, lt, label, err := lifetime(r.PostForm, u.h.now())
	if err != nil {
		u.fail(w, me, err)
		return
	}
	u.render(w, http.StatusOK, "review", view{Title: "Review", Me: me, Data: map[string]any{"A": a, "Scope": sc, "Granted": grantedOf(sc),
		"Picked": r.PostForm["grant"], "Lifetime": lt, "LifetimeLabel": label, "Ends": end}})
}

func (u *ui) approve(w http.ResponseWriter, r *http.Request, me *session) {
	a, err := u.pending(r, me)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	sc := narrowed(a, r.PostForm)
	if len(sc) == 0 {
		u.fail(w, me, fmt.Errorf("%w: nothing is checked: deny the request instead", switchboard.ErrInvalidArgument))
		return
	}
	end, _, _, err := lifetime(r.PostForm, u.h.now())
	if err != nil {
		u.fail(w, me, err)
		return
	}
	g, err := u.h.cfg.SB.ApproveWith(r.Context(), me.human, a.EdgeID, switchboard.ApproveOptions{Scope: sc, ExpiresAt: end})
	if err != nil {
		u.fail(w, me, err)
		return
	}
	var lines []line
	for _, v := range grantedOf(g.Scope) {
		lines = append(lines, line{theirs(v.Verb.DescribeIn(v.Queue))})
	}
	until := "It lasts until you revoke it, under Connections."
	if !g.ExpiresAt.IsZero() {
		until = "It ends on " + g.ExpiresAt.UTC().Format("2 January 2006, 15:04 UTC") + ", or sooner if you revoke it under Connections."
	}
	u.render(w, http.StatusOK, "done", view{Title: "Approved", Me: me, Data: map[string]any{
		"Heading": "Approved",
		"Lead":    line{theirs(person(a.Human)), words("'s agent "), theirs(a.From.Card.Name), words(" may now:")},
		"Lines":   lines,
		"Next":    "Nothing can use it until that agent picks up its access, which only it can do. " + until,
		"Details": map[string]string{"Grant": g.ID, "Request": a.EdgeID},
	}})
}

// piece is part of a sentence a page shows: the host's own words, or
// outside text (Theirs), which the page isolates and clips.
type piece struct {
	Text   string
	Theirs bool
}

// line is a sentence of pieces.
type line []piece

func words(s string) piece  { return piece{Text: s} }
func theirs(s string) piece { return piece{Text: s, Theirs: true} }

func (u *ui) deny(w http.ResponseWriter, r *http.Request, me *session) {
	a, err := u.pending(r, me)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	if err := u.h.cfg.SB.Deny(r.Context(), me.human, a.EdgeID); err != nil {
		u.fail(w, me, err)
		return
	}
	lines := []line{{words("You turned down the request from "), theirs(person(a.Human)), words("'s agent "), theirs(a.From.Card.Name), words(". It was given nothing.")}}
	if r.PostForm.Get("block") == "1" {
		if err := u.h.cfg.SB.Block(r.Context(), me.human, switchboard.Human{Issuer: a.Human.Issuer, Subject: a.Human.Subject}); err != nil {
			u.fail(w, me, err)
			return
		}
		lines = append(lines, line{theirs(person(a.Human)), words(" can no longer ask you for anything, from any agent.")})
	}
	u.render(w, http.StatusOK, "done", view{Title: "Denied", Me: me, Data: map[string]any{"Heading": "Denied", "Lines": lines,
		"Details": map[string]string{"Request": a.EdgeID, "Account": a.Human.Subject, "Identity provider": a.Human.Issuer}}})
}

// ---- connections

// connView is a connection as the connections pages show it: the person
// on the other side first, then the agents, then what the grant allows.
type connView struct {
	C       switchboard.Connection
	Granted bool   // the signed-in human gave it (else one of their agents holds it)
	Person  string // the person on the other side ("you" for their own agents)
	Contact string // how to reach or recognise them: an attested email, else account at issuer
	Theirs  string // their agent's name
	Mine    string // the signed-in human's agent's name
	May     []line // what the grant allows, sentence by sentence
	Ends    time.Time
}

func viewConn(c switchboard.Connection, me *session) connView {
	v := connView{C: c, Granted: c.Direction == switchboard.Granted, Ends: c.Grant.ExpiresAt}
	holder, target := agentName(c.Grant.Holder, c.HolderName), agentName(c.Grant.Target, c.TargetName)
	switch {
	case c.Edge == nil: // a Vend: the human's own agent
		v.Person, v.Theirs, v.Mine = "You", holder, target
	case v.Granted:
		p := c.Edge.Provenance
		v.Person, v.Contact, v.Theirs, v.Mine = p.Name, p.Email, holder, target
		if v.Person == "" {
			v.Person = p.Subject
		}
		if v.Contact == "" {
			v.Contact = humanLabel(p.Human())
		}
	default:
		v.Person, v.Contact, v.Theirs, v.Mine = c.Grant.Grantor.Subject, humanLabel(c.Grant.Grantor), target, holder
	}
	for _, g := range grantedOf(c.Grant.Scope) {
		v.May = append(v.May, line{theirs(g.Verb.DescribeIn(g.Queue))})
	}
	return v
}

func (u *ui) connections(w http.ResponseWriter, r *http.Request, me *session) {
	cs, err := u.h.cfg.SB.Connections(r.Context(), me.human)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	views := make([]connView, len(cs))
	for i, c := range cs {
		views[i] = viewConn(c, me)
	}
	u.render(w, http.StatusOK, "connections", view{Title: "Connections", Me: me, Data: views})
}

// connectionOf finds one of the human's connections by grant id.
func (u *ui) connectionOf(r *http.Request, me *session) (switchboard.Connection, error) {
	cs, err := u.h.cfg.SB.Connections(r.Context(), me.human)
	if err != nil {
		return switchboard.Connection{}, err
	}
	for _, c := range cs {
		if c.Grant.ID == r.PathValue("grant") {
			return c, nil
		}
	}
	return switchboard.Connection{}, fmt.Errorf("%w: connection", switchboard.ErrNotFound)
}

func (u *ui) connection(w http.ResponseWriter, r *http.Request, me *session) {
	c, err := u.connectionOf(r, me)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	var open []switchboard.Todo
	for _, st := range []switchboard.TodoState{switchboard.TodoLeased, switchboard.TodoQueued} {
		ts, err := u.h.cfg.SB.GrantTodos(r.Context(), me.human, c.Grant.ID, &switchboard.ListOptions{State: st, Limit: 50})
		if err != nil {
			u.fail(w, me, err)
			return
		}
		open = append(open, ts...)
	}
	u.render(w, http.StatusOK, "connection", view{Title: "Connection", Me: me, Data: map[string]any{"V": viewConn(c, me), "Open": open}})
}

func (u *ui) revoke(w http.ResponseWriter, r *http.Request, me *session) {
	c, err := u.connectionOf(r, me)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		u.fail(w, me, fmt.Errorf("%w: tick the box to confirm the revocation", switchboard.ErrInvalidArgument))
		return
	}
	if err := u.h.cfg.SB.Revoke(r.Context(), me.human, c.Grant.ID); err != nil {
		u.fail(w, me, err)
		return
	}
	u.render(w, http.StatusOK, "done", view{Title: "Revoked", Me: me, Data: map[string]any{
		"Heading": "Revoked",
		"Lines": []line{{theirs(agentName(c.Grant.Holder, c.HolderName)), words(" can no longer use this connection: its next call fails.")},
			{words("Work it sent that nobody had started is cancelled; work already started finishes or fails as usual.")}},
		"Details": map[string]string{"Grant": c.Grant.ID},
	}})
}

// agentName is how a page names an agent: its card's name, else its id.
func agentName(id, name string) string {
	if name != "" {
		return name
	}
	return id
}

// ---- history

// historyScan bounds how many of the newest events the history page reads.
const historyScan = 2000

// concerns reports whether an event concerns the human: they acted, or it
// is about one of their personas, edges or grants.
type concerns struct {
	actor                   string
	personas, edges, grants map[string]bool
}

func (c concerns) match(e switchboard.Event) bool {
	return e.Actor == c.actor || c.personas[e.Persona] || c.edges[e.Edge] || c.grants[e.Grant]
}

func (u *ui) history(w http.ResponseWriter, r *http.Request, me *session) {
	ctx := r.Context()
	sb := u.h.cfg.SB
	c := concerns{actor: "human:" + me.human.Issuer + "#" + me.human.Subject, personas: map[string]bool{}, edges: map[string]bool{}, grants: map[string]bool{}}
	if cs, err := sb.Connections(ctx, me.human); err == nil {
		for _, x := range cs {
			c.grants[x.Grant.ID] = true
			c.edges[x.Grant.EdgeID] = true
			if x.Direction == switchboard.Granted {
				c.personas[x.Grant.Target] = true
			} else {
				c.personas[x.Grant.Holder] = true
			}
		}
	}
	if todos, err := sb.Approvals(ctx, me.human); err == nil {
		for _, t := range todos {
			if t.Approval != nil {
				c.edges[t.Approval.EdgeID] = true
				c.personas[t.Approval.To] = true
			}
		}
	}
	delete(c.edges, "")
	cp, cpErr := sb.Checkpoint(ctx)
	var after uint64
	if cpErr == nil {
		off, _ := sb.LogOffset(ctx)
		if last := off + cp.Size; last > historyScan {
			after = last - historyScan
		}
	}
	var mine []switchboard.Event
	for {
		evs, err := sb.Events(ctx, after, 500)
		if err != nil {
			u.fail(w, me, err)
			return
		}
		for _, e := range evs {
			if c.match(e) {
				mine = append(mine, e)
				// What the human did names more of theirs.
				c.edges[e.Edge], c.grants[e.Grant] = true, true
				delete(c.edges, "")
				delete(c.grants, "")
			}
		}
		if len(evs) < 500 {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	slices.Reverse(mine)
	nm := u.newNamer(ctx, me)
	items := make([]historyItem, 0, len(mine))
	for _, e := range mine {
		if strings.HasSuffix(e.Queue, "/"+switchboard.ApprovalsQueue) {
			continue // an approval todo's life: told by the request's own events
		}
		items = append(items, historyItem{Event: e, Line: nm.sentence(e), Mine: e.Actor == c.actor})
	}
	u.render(w, http.StatusOK, "history", view{Title: "History", Me: me, Data: map[string]any{"Items": items, "Signed": cpErr == nil, "Checkpoint": cp}})
}

// historyItem is one event as the history page tells it: a sentence in the
// reader's terms, and the event itself behind it (ids, proof).
type historyItem struct {
	Event switchboard.Event
	Line  line
	Mine  bool // the reader did it: a proof is offered
}

// namer puts names to the ids events hold, in the signed-in human's terms.
type namer struct {
	u      *ui
	ctx    context.Context
	me     *session
	agents map[string]string // persona id → its card's name
	edges  map[string]*switchboard.Edge
}

func (u *ui) newNamer(ctx context.Context, me *session) *namer {
	n := &namer{u: u, ctx: ctx, me: me, agents: map[string]string{}, edges: map[string]*switchboard.Edge{}}
	if cs, err := u.h.cfg.SB.Connections(ctx, me.human); err == nil {
		for _, c := range cs {
			n.agents[c.Grant.Holder], n.agents[c.Grant.Target] = agentName(c.Grant.Holder, c.HolderName), agentName(c.Grant.Target, c.TargetName)
		}
	}
	return n
}

// agent is the name of persona id: its card's, or its id.
func (n *namer) agent(id string) string {
	if name, ok := n.agents[id]; ok {
		return name
	}
	name := id
	if l, err := n.u.h.cfg.SB.Lookup(n.ctx, id); err == nil && l.Card.Name != "" {
		name = l.Card.Name
	}
	n.agents[id] = name
	return name
}

// edge is the friend edge id as the reader may see it (nil if not theirs).
func (n *namer) edge(id string) *switchboard.Edge {
	if id == "" {
		return nil
	}
	if e, ok := n.edges[id]; ok {
		return e
	}
	var out *switchboard.Edge
	if e, err := n.u.h.cfg.SB.Edge(n.ctx, n.me.human, id); err == nil {
		out = &e
	}
	n.edges[id] = out
	return out
}

// requester names the person behind an edge's request.
func requester(e *switchboard.Edge) string {
	if e.Provenance.Name != "" {
		return e.Provenance.Name
	}
	return e.Provenance.Subject
}

// sentence tells event e in the reader's terms.
func (n *namer) sentence(e switchboard.Event) line {
	me := "human:" + n.me.human.Issuer + "#" + n.me.human.Subject
	byMe := e.Actor == me
	ed := n.edge(e.Edge)
	mine := ed != nil && ed.Requester == n.me.human // the reader's agent asked
	agent := func() piece {
		if ed != nil {
			return theirs(n.agent(ed.From))
		}
		return theirs(n.agent(e.Persona))
	}
	whose := func() line { // "Dave's agent Bookkeeping (dave@example.com)"
		if ed == nil {
			return line{words("the agent "), agent()}
		}
		if mine {
			return line{words("your agent "), agent()}
		}
		l := line{theirs(requester(ed)), words("'s agent "), agent()}
		if ed.Provenance.Email != "" {
			l = append(l, words(" ("), theirs(ed.Provenance.Email), words(")"))
		}
		return l
	}
	cat := func(parts ...any) line {
		var l line
		for _, p := range parts {
			switch p := p.(type) {
			case string:
				l = append(l, words(p))
			case piece:
				l = append(l, p)
			case line:
				l = append(l, p...)
			}
		}
		return l
	}
	allowed := func() line {
		var l line
		if ed == nil {
			return l
		}
		for i, g := range grantedOf(ed.Granted) {
			if i > 0 {
				l = append(l, words("; "))
			}
			l = append(l, theirs(g.Verb.DescribeIn(g.Queue)))
		}
		return l
	}
	switch e.Type {
	case switchboard.EventPersonaPublished:
		return cat("You published your agent ", theirs(n.agent(e.Persona)), ".")
	case switchboard.EventEdgeRequested:
		if mine {
			return cat("Your agent ", agent(), " asked ", theirs(n.agent(ed.To)), " for access.")
		}
		to := e.Persona
		if ed != nil {
			to = ed.To
		}
		return cat(whose(), " asked to send work to your agent ", theirs(n.agent(to)), ".")
	case switchboard.EventEdgeApproved:
		if byMe {
			return cat("You let ", whose(), ": ", allowed(), ".")
		}
		return cat("Your agent ", agent(), "'s request was approved: ", allowed(), ".")
	case switchboard.EventEdgeDenied:
		if byMe {
			return cat("You turned down ", whose(), ".")
		}
		return cat("Your agent ", agent(), "'s request was turned down.")
	case switchboard.EventEdgeWithdrawn:
		return cat(whose(), " withdrew its request.")
	case switchboard.EventEdgeExpired:
		return cat("The request of ", whose(), " lapsed unanswered.")
	case switchboard.EventEdgeReplaced:
		return cat("A newer approval replaced the earlier one for ", whose(), ".")
	case switchboard.EventEdgeRevoked, switchboard.EventGrantRevoked:
		switch {
		case byMe:
			return cat("You ended the access of ", whose(), ".")
		case e.Actor == "system":
			return cat("The access of ", whose(), " ended (its time was up, or it was never picked up).")
		}
		return cat("The access of ", whose(), " was ended by the other side.")
	case switchboard.EventGrantMinted:
		return cat("Access was issued to ", whose(), ".")
	case switchboard.EventGrantCollected:
		return cat(whose(), " picked up its access.")
	case switchboard.EventHumanBlocked:
		return cat("You blocked ", theirs(e.Detail), " from asking again.")
	case switchboard.EventHumanUnblocked:
		return cat("You unblocked ", theirs(e.Detail), ".")
	case switchboard.EventTodoCreated:
		return cat(theirs(n.agent(strings.TrimPrefix(e.Actor, "agent:"))), " sent work", queueOf(e), ".")
	case switchboard.EventTodoClaimed:
		return cat(theirs(n.agent(e.Persona)), " started on work", queueOf(e), ".")
	case switchboard.EventTodoCompleted:
		return cat("Work", queueOf(e), " was finished.")
	case switchboard.EventTodoFailed, switchboard.EventTodoDead:
		return cat("Work", queueOf(e), " failed.")
	case switchboard.EventTodoCancelled:
		return cat("Work", queueOf(e), " was cancelled.")
	}
	return cat("Recorded: ", theirs(string(e.Type)), ".")
}

// queueOf is " in <queue>" for an event's queue, by its name.
func queueOf(e switchboard.Event) line {
	q := e.Queue
	if i := strings.LastIndexByte(q, '/'); i >= 0 {
		q = q[i+1:]
	}
	if q == "" || strings.HasPrefix(q, "_") {
		return nil
	}
	return line{words(" in "), theirs(q)}
}

// checkpoint downloads the log's latest signed checkpoint (a C2SP signed
// note): kept, it lets the human check later, without trusting this host,
// that the log only grew.
func (u *ui) checkpoint(w http.ResponseWriter, r *http.Request, me *session) {
	cp, err := u.h.cfg.SB.Checkpoint(r.Context())
	if err != nil {
		u.fail(w, me, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="checkpoint-%d.txt"`, cp.Size))
	_, _ = w.Write(cp.Note)
}

// proof downloads an inclusion proof of one event the human may see,
// against the latest checkpoint, with that checkpoint and the log's
// verifier key: everything switchboard.VerifyInclusion needs.
func (u *ui) proof(w http.ResponseWriter, r *http.Request, me *session) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		u.fail(w, me, fmt.Errorf("%w: event number", switchboard.ErrInvalidArgument))
		return
	}
	evs, err := u.h.cfg.SB.Events(r.Context(), seq-1, 1)
	if err != nil || len(evs) != 1 || evs[0].Seq != seq || evs[0].Actor != "human:"+me.human.Issuer+"#"+me.human.Subject {
		u.fail(w, me, errors.Join(fmt.Errorf("%w: event (proofs are offered for your own actions)", switchboard.ErrNotFound), err))
		return
	}
	p, err := u.h.cfg.SB.ProveEvent(r.Context(), seq, 0)
	if err != nil {
		u.fail(w, me, err)
		return
	}
	cp, err := u.h.cfg.SB.Checkpoint(r.Context())
	if err != nil {
		u.fail(w, me, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="event-%d-proof.json"`, seq))
	_ = json.NewEncoder(w).Encode(map[string]any{"event": evs[0], "proof": p, "checkpoint": string(cp.Note), "verifier_key": u.h.cfg.SB.LogVerifierKey()})
}
