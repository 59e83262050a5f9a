// The host: every HTTP route a switchboard deployment needs, on net/http's
// standard routing.

package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/mcptools"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
)

// maxBody bounds every request body; a card is at most 256 KiB.
const maxBody = 512 << 10

// hostConfig is what newHost needs.
type hostConfig struct {
	SB    *switchboard.Switchboard
	Store store.Store // the store SB runs on: cards are served from its local directory only
	// Primary, if set, is the persona served at /.well-known/agent-card.json
	// itself, where a remote directory that allow-lists this origin looks.
	Primary string
	Logger  *slog.Logger
	// SessionTTL is how long a human stays signed in at most. Default 12
	// hours.
	SessionTTL time.Duration
	// IdleTimeout ends a session that has not been used for this long.
	// Default 30 minutes.
	IdleTimeout time.Duration
	// SignIn, if set, is the browser sign-in (the OIDC authorization code
	// flow) the approvals pages use.
	SignIn *SignIn
	// Dev, if set, is a local OIDC issuer (the test kit's) the host trusts
	// and offers sign-in and tokens from, with no identity provider: for
	// trying the host on a fresh clone. Never in production.
	Dev *switchboardtest.Issuer
	// BaseURL is the URL agents reach this host at: DPoP proofs name
	// BaseURL + the route's path (htu). DPoP needs it (never the request's
	// own Host header, which the client chooses); main always sets it.
	BaseURL string
	// Clock is the Switchboard's clock (its Config.Clock), which the
	// pages reckon a grant's end from; nil is the system clock.
	Clock switchboard.Clock
	// Witness, if set, is served at POST /witness/add-checkpoint: this
	// host cosigns the checkpoints of the logs it witnesses (C2SP
	// tlog-witness), for the hosts its humans are friends with.
	Witness *witness.Server
}

// now is the time on the Switchboard's clock.
func (h *host) now() time.Time {
	if h.cfg.Clock != nil {
		return h.cfg.Clock.Now()
	}
	return time.Now()
}

type host struct {
	cfg   hostConfig
	local switchboard.Directory

	mu       sync.Mutex
	logins   map[string]login   // sha256(login id) → the nonce the login must carry
	sessions map[string]session // sha256(session token) → the signed-in human
}

// login is a sign-in in progress: the nonce its ID token must carry, and
// for a browser sign-in the state and PKCE verifier.
type login struct {
	nonce, state, verifier string
	expires                time.Time
}

// session is a signed-in human.
type session struct {
	human    switchboard.Human
	name     string
	email    string
	csrf     string // the token every form of this session carries
	expires  time.Time
	lastSeen time.Time
}

// Human is the signed-in human (for templates).
func (s *session) Human() switchboard.Human { return s.human }

// Name is how the human's issuer names them, or their subject.
func (s *session) Name() string {
	if s.name != "" {
		return s.name
	}
	return s.human.Subject
}

func newHost(cfg hostConfig) (http.Handler, error) {
	_, handler, err := buildHost(cfg)
	return handler, err
}

// buildHost is newHost, also returning the host (for tests).
func buildHost(cfg hostConfig) (*host, http.Handler, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	h := &host{cfg: cfg, local: switchboard.NewLocalDirectory(cfg.Store), logins: map[string]login{}, sessions: map[string]session{}}
	mux := http.NewServeMux()
	// Discovery: cards of this host's own discoverable personas, at the
	// A2A well-known path under the persona's URL, and at the URL itself
	// (with or without a trailing slash): an A2A client that resolves the
	// well-known path against "…/agents/bob-desk" (no slash) loses the
	// persona's name, so give clients the card URL or the URL with a slash.
	mux.HandleFunc("GET /.well-known/agent-card.json", h.primaryCard)
	mux.HandleFunc("GET /agents/{id}/.well-known/agent-card.json", h.card)
	mux.HandleFunc("GET /agents/{id}", h.card)
	mux.HandleFunc("GET /agents/{id}/{$}", h.card)
	// The requesting agent: compute a request's nonce, send the friend
	// request, collect the credential.
	mux.HandleFunc("POST /friend-requests/nonce", h.nonce)
	mux.HandleFunc("POST /agents/{id}/friend-requests", h.friendRequest)
	mux.HandleFunc("POST /edges/{id}/collect", h.collect)
	// Humans: sign in, publish personas, decide approvals.
	mux.HandleFunc("POST /login/start", h.loginStart)
	mux.HandleFunc("POST /login", h.login)
	mux.HandleFunc("POST /logout", h.human(h.logout))
	mux.HandleFunc("PUT /me/personas/{id}", h.human(h.publish))
	mux.HandleFunc("GET /me/approvals", h.human(h.approvals))
	mux.HandleFunc("POST /me/edges/{id}/approve", h.human(h.approve))
	mux.HandleFunc("POST /me/edges/{id}/deny", h.human(h.deny))
	mux.HandleFunc("POST /me/grants/{id}/revoke", h.human(h.revoke))
	mux.HandleFunc("POST /me/blocks", h.human(h.block))
	// Agents with a credential: the queue verbs over MCP.
	var mcpOpts *mcptools.Options
	if cfg.BaseURL != "" {
		mcpOpts = &mcptools.Options{URL: strings.TrimSuffix(cfg.BaseURL, "/") + "/mcp"}
	}
	mux.Handle("/mcp", mcptools.Handler(cfg.SB, mcpOpts))
	if cfg.Witness != nil {
		mux.Handle("POST /witness/add-checkpoint", cfg.Witness)
	}
	if cfg.Dev != nil && strings.HasPrefix(cfg.Dev.URL(), strings.TrimSuffix(cfg.BaseURL, "/")+"/dev/issuer") {
		// The dev issuer this host serves itself, at a URL that survives a
		// restart (examples/host -dev).
		mux.Handle("/dev/issuer/", http.StripPrefix("/dev/issuer", cfg.Dev.Handler()))
	}
	if cfg.Dev != nil {
		mux.HandleFunc("POST /dev/login", h.devLogin)
		mux.HandleFunc("POST /dev/id-token", h.devToken)
	}
	// Humans in a browser: sign-in, inbox, decisions, connections, history.
	u, err := newUI(h, cfg.SignIn)
	if err != nil {
		return nil, nil, err
	}
	u.routes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.failCode(w, http.StatusNotFound, "not_found", "route", "no route "+r.Method+" "+r.URL.Path)
	})
	// Every state-changing request a browser sends from another origin is
	// refused (Sec-Fetch-Site / Origin), before any route sees it; agents'
	// HTTP clients send neither header and pass.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.failCode(w, http.StatusForbidden, "cross_origin", "origin", "a cross-origin request is refused")
	}))
	return h, cop.Handler(mux), nil
}

// ---- answers

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// fail answers err with its switchboard status and code. Messages from
// switchboard never hold secrets.
func (h *host) fail(w http.ResponseWriter, r *http.Request, err error) {
	st := switchboard.StatusOf(err)
	if st.HTTP == http.StatusNoContent {
		w.WriteHeader(st.HTTP)
		return
	}
	if !st.RetryAt.IsZero() {
		secs := int(time.Until(st.RetryAt).Seconds()) + 1
		w.Header().Set("Retry-After", fmt.Sprint(max(secs, 1)))
	}
	if st.HTTP >= 500 {
		h.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", st.Code, "err", err)
	}
	// A DPoP refusal carries its challenge (RFC 9449 §7.1).
	if errors.Is(err, switchboard.ErrUseDPoPNonce) || errors.Is(err, switchboard.ErrInvalidDPoPProof) || errors.Is(err, switchboard.ErrDPoPRequired) {
		mcptools.DPoPChallenge(w.Header(), h.cfg.SB, err, "")
	}
	writeJSON(w, st.HTTP, map[string]apiError{"error": {Code: st.Code, Message: err.Error()}})
}

// failCode answers an error of the host's own (a route, a body, a sign-in)
// in switchboard's one style: "switchboard: <verb>: <code in words>:
// <detail>", as the library's errors read (fail passes those through).
func (h *host) failCode(w http.ResponseWriter, status int, code, verb, detail string) {
	msg := "switchboard: " + verb + ": " + strings.ReplaceAll(code, "_", " ") + ": " + detail
	writeJSON(w, status, map[string]apiError{"error": {Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// jsonRequest refuses a state-changing request that is not
// application/json, body or not: a cross-site HTML form cannot send that
// type without a preflight, so the session cookie alone never acts.
func (h *host) jsonRequest(w http.ResponseWriter, r *http.Request) bool {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		h.failCode(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "read body", "send Content-Type: application/json")
		return false
	}
	return true
}

// read decodes a JSON body into v: bounded, application/json only (which
// also keeps cross-site forms out of the cookie-authenticated routes), and
// through switchboard.DecodeJSON, the one strict reading.
func (h *host) read(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		h.failCode(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "read body", "send Content-Type: application/json")
		return false
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		h.failCode(w, http.StatusRequestEntityTooLarge, "too_large", "read body", fmt.Sprintf("the body is over %d bytes", maxBody))
		return false
	}
	if err != nil {
		h.failCode(w, http.StatusBadRequest, "invalid_argument", "read body", "the body could not be read")
		return false
	}
	if err := switchboard.DecodeJSON(b, v); err != nil {
		h.fail(w, r, err)
		return false
	}
	return true
}

// ---- cards

func (h *host) primaryCard(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Primary == "" {
		h.failCode(w, http.StatusNotFound, "not_found", "agent card", "this host has no primary agent")
		return
	}
	h.serveCard(w, r, h.cfg.Primary)
}

func (h *host) card(w http.ResponseWriter, r *http.Request) { h.serveCard(w, r, r.PathValue("id")) }

// serveCard serves a persona's card from this store's own directory —
// never another origin's card a remote directory fetched — with caching
// headers; If-None-Match with the current ETag is 304.
func (h *host) serveCard(w http.ResponseWriter, r *http.Request, id string) {
	l, err := h.local.Lookup(r.Context(), id)
	if err != nil {
		h.fail(w, r, err) // unknown and undiscoverable are the same 404
		return
	}
	// A2A v1.0 is the default; a client on a v0.3 SDK asks for the v0.3
	// rendering with an A2A-Version request header naming 0.x.
	var body []byte
	if v := strings.TrimSpace(r.Header.Get("A2A-Version")); strings.HasPrefix(v, "0.") {
		body, err = agentcard.EncodeV03(l.Card)
	} else {
		body, err = json.Marshal(l.Card)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Vary", "A2A-Version")
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Header().Set("ETag", etag)
	for _, t := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		if t = strings.TrimSpace(t); t == etag || t == "W/"+etag || t == "*" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// ---- the requesting agent

// friendRequestBody is a switchboard.FriendRequest; an agent of another
// host (a "guest", see guest) adds its own card.
type friendRequestBody struct {
	switchboard.FriendRequest
	FromCard json.RawMessage `json:"from_card,omitempty"`
}

func (h *host) friendRequest(w http.ResponseWriter, r *http.Request) {
	var body friendRequestBody
	if !h.read(w, r, &body) {
		return
	}
	req := body.FriendRequest
	if req.To == "" {
		req.To = r.PathValue("id")
	} else if req.To != r.PathValue("id") {
		h.failCode(w, http.StatusBadRequest, "invalid_argument", "request", "to does not name the persona of this URL")
		return
	}
	if strings.Contains(req.From, "@") {
		if err := h.guest(r, req, body.FromCard); err != nil {
			h.fail(w, r, err)
			return
		}
	} else if len(body.FromCard) > 0 {
		h.failCode(w, http.StatusBadRequest, "invalid_argument", "request", "from_card is only for agents of other hosts (from = agent@issuer-host)")
		return
	}
	edge, created, err := h.cfg.SB.Request(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, map[string]any{"edge": edge, "created": created})
}

// guest registers an agent of another host so its friend request can be
// checked like a local one. Its id is "name@" and the key of the OIDC
// issuer that signs its human in (issuerKey: the issuer's host, and a hash
// of its whole URL when it has a path, so two tenants of one provider
// never share names): a guest id is owned by the first human of that
// issuer to use it, and no local persona has an '@'. The ID token is verified here against the request's nonce
// without being spent; Request then verifies and spends it. The guest is
// published undiscoverable, with the card the request carries.
func (h *host) guest(r *http.Request, req switchboard.FriendRequest, rawCard json.RawMessage) error {
	prov, err := h.cfg.SB.VerifyHuman(r.Context(), req.IDToken, switchboard.RequestNonce(req))
	if err != nil {
		return err
	}
	key, err := issuerKey(prov.Issuer)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(req.From, "@"+key) || strings.Count(req.From, "@") != 1 {
		return fmt.Errorf("switchboard: request: %w: an agent of another host is named name@%s after its issuer", switchboard.ErrInvalidArgument, key)
	}
	if len(rawCard) == 0 {
		return fmt.Errorf("switchboard: request: %w: an agent of another host sends its card as from_card", switchboard.ErrInvalidArgument)
	}
	card, err := agentcard.Parse(rawCard) // "switchboard: parse card: …", answered as invalid_argument
	if err != nil {
		return err
	}
	_, err = h.cfg.SB.Publish(r.Context(), switchboard.Persona{ID: req.From, Owner: prov.Human(), Card: card, Discoverable: false})
	if errors.Is(err, switchboard.ErrConflict) {
		return fmt.Errorf("switchboard: request: %w: the verified human does not own agent %q", switchboard.ErrForbidden, req.From)
	}
	return err
}

// nonce returns the nonce a friend request's ID token must carry, and the
// canonical text it hashes (switchboard.RequestNonce), for a draft request
// (from, to, scope, why, pickup; id_token is not read): for agents in any
// language, and to check one's own implementation of the derivation.
func (h *host) nonce(w http.ResponseWriter, r *http.Request) {
	var req switchboard.FriendRequest
	if !h.read(w, r, &req) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"nonce": switchboard.RequestNonce(req), "canonical": string(switchboard.RequestNonceInput(req))})
}

// issuerKey is what names an issuer in guest ids: its host ("idp.example",
// with a port if it has one) when the issuer URL has no path, else the host
// and ":t-" with 8 hex digits of SHA-256 of the whole issuer URL
// ("idp.example:t-1a2b3c4d"): tenants of one provider at
// https://idp.example/tenant-a and /tenant-b get different keys.
func issuerKey(issuer string) (string, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("switchboard: request: %w: issuer %q is not a URL", switchboard.ErrInvalidArgument, issuer)
	}
	if strings.Trim(u.Path, "/") == "" {
		return u.Host, nil
	}
	sum := sha256.Sum256([]byte(issuer))
	return u.Host + ":t-" + hex.EncodeToString(sum[:4]), nil
}

func (h *host) collect(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Secret string `json:"secret"`
	}
	if !h.read(w, r, &body) {
		return
	}
	// A request bound to a key is collected with a DPoP proof of this
	// request over the pickup secret.
	var g switchboard.Grant
	var cred switchboard.Credential
	var err error
	switch proofs := r.Header.Values("DPoP"); len(proofs) {
	case 0:
		g, cred, err = h.cfg.SB.Collect(r.Context(), r.PathValue("id"), body.Secret)
	case 1:
		if h.cfg.BaseURL == "" {
			h.failCode(w, http.StatusNotImplemented, "not_configured", "collect", "DPoP needs the host's public URL (-base-url)")
			return
		}
		p := switchboard.Proof{JWT: proofs[0], Method: r.Method, URL: strings.TrimSuffix(h.cfg.BaseURL, "/") + r.URL.EscapedPath()}
		g, cred, err = h.cfg.SB.CollectWithProof(r.Context(), r.PathValue("id"), body.Secret, p)
	default:
		h.failCode(w, http.StatusBadRequest, "invalid_argument", "collect", "more than one DPoP header")
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"grant": g, "credential": cred, "mcp": "/mcp"})
}

// ---- humans

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func hashKey(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, ttl time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: int(ttl.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
}

// loginStart begins a sign-in: a fresh nonce the host's OIDC login must
// carry (pass it to the identity provider's authorization request), bound
// to this browser by a cookie. The host keeps only the cookie's hash.
func (h *host) loginStart(w http.ResponseWriter, r *http.Request) {
	id, nonce := randomToken(), randomToken()
	h.mu.Lock()
	now := time.Now()
	for k, l := range h.logins {
		if now.After(l.expires) {
			delete(h.logins, k)
		}
	}
	h.logins[hashKey(id)] = login{nonce: nonce, expires: now.Add(10 * time.Minute)}
	h.mu.Unlock()
	setCookie(w, r, "sb_login", id, 10*time.Minute)
	writeJSON(w, http.StatusOK, map[string]string{"nonce": nonce})
}

// login finishes a sign-in with the ID token the identity provider returned:
// switchboard verifies it (issuer, audience, freshness, the nonce of this
// login) and the human gets a session cookie.
func (h *host) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		IDToken string `json:"id_token"`
	}
	if !h.read(w, r, &body) {
		return
	}
	c, err := r.Cookie("sb_login")
	if err != nil {
		h.failCode(w, http.StatusUnauthorized, "unauthenticated", "sign in", "start the sign-in with POST /login/start")
		return
	}
	h.mu.Lock()
	l, ok := h.logins[hashKey(c.Value)]
	delete(h.logins, hashKey(c.Value)) // one try per nonce
	h.mu.Unlock()
	if !ok || time.Now().After(l.expires) || l.state != "" {
		h.failCode(w, http.StatusUnauthorized, "unauthenticated", "sign in", "the sign-in expired; start again")
		return
	}
	prov, err := h.cfg.SB.VerifyHuman(r.Context(), body.IDToken, l.nonce)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.startSession(w, r, prov)
}

// startSession gives a verified human a session cookie and answers JSON.
func (h *host) startSession(w http.ResponseWriter, r *http.Request, prov switchboard.Provenance) {
	h.newSession(w, r, prov)
	setCookie(w, r, "sb_login", "", -time.Second)
	writeJSON(w, http.StatusOK, map[string]any{"human": prov.Human(), "name": prov.Name})
}

// newSession signs a verified human in: a session cookie (HttpOnly,
// SameSite=Lax, Secure over TLS) whose hash keys the session here.
func (h *host) newSession(w http.ResponseWriter, r *http.Request, prov switchboard.Provenance) {
	tok, now := randomToken(), time.Now()
	h.mu.Lock()
	for k, s := range h.sessions {
		if now.After(s.expires) || now.Sub(s.lastSeen) > h.cfg.IdleTimeout {
			delete(h.sessions, k)
		}
	}
	h.sessions[hashKey(tok)] = session{human: prov.Human(), name: prov.Name, email: prov.Email, csrf: randomToken(),
		expires: now.Add(h.cfg.SessionTTL), lastSeen: now}
	h.mu.Unlock()
	setCookie(w, r, "sb_session", tok, h.cfg.SessionTTL)
}

// session returns the request's live session, marking it used; one past
// its lifetime or idle too long is ended.
func (h *host) session(w http.ResponseWriter, r *http.Request) (session, bool) {
	c, err := r.Cookie("sb_session")
	if err != nil {
		return session{}, false
	}
	k, now := hashKey(c.Value), time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[k]
	if ok && (now.After(s.expires) || now.Sub(s.lastSeen) > h.cfg.IdleTimeout) {
		delete(h.sessions, k)
		setCookie(w, r, "sb_session", "", -time.Second)
		return session{}, false
	}
	if ok {
		s.lastSeen = now
		h.sessions[k] = s
	}
	return s, ok
}

// endSession signs the request's session out.
func (h *host) endSession(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie("sb_session"); err == nil {
		h.mu.Lock()
		delete(h.sessions, hashKey(c.Value))
		h.mu.Unlock()
	}
	setCookie(w, r, "sb_session", "", -time.Second)
}

// human wraps a JSON route for a signed-in human.
func (h *host) human(fn func(http.ResponseWriter, *http.Request, switchboard.Human)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.session(w, r)
		if !ok {
			h.failCode(w, http.StatusUnauthorized, "unauthenticated", "session", "sign in (POST /login/start, then POST /login)")
			return
		}
		fn(w, r, s.human)
	}
}

// devLogin (-dev only) signs a test human in with the local issuer: the
// same VerifyHuman path a real sign-in takes, with a token minted here.
func (h *host) devLogin(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Subject string `json:"subject"`
		Name    string `json:"name,omitempty"`
		Email   string `json:"email,omitempty"`
	}
	if !h.read(w, r, &body) {
		return
	}
	if body.Subject == "" {
		h.failCode(w, http.StatusBadRequest, "invalid_argument", "dev login", "subject is empty")
		return
	}
	nonce := randomToken()
	tok := h.cfg.Dev.Token(switchboardtest.Login{Subject: body.Subject, Name: body.Name, Email: body.Email, Nonce: nonce, At: time.Now()})
	prov, err := h.cfg.SB.VerifyHuman(r.Context(), tok, nonce)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.startSession(w, r, prov)
}

// devToken (-dev only) mints an ID token of the local issuer for a
// subject and nonce: what an agent's human would get from a real identity
// provider for a friend request (its nonce from POST /friend-requests/nonce).
func (h *host) devToken(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Subject string `json:"subject"`
		Nonce   string `json:"nonce"`
	}
	if !h.read(w, r, &body) {
		return
	}
	if body.Subject == "" || body.Nonce == "" {
		h.failCode(w, http.StatusBadRequest, "invalid_argument", "dev token", "subject and nonce are required")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	c := h.cfg.Dev.Claims(body.Subject, body.Nonce, time.Now())
	c.Name, c.Email, c.ID = body.Subject, body.Subject+"@dev.example", randomToken() // a jti: a retry within the second is a new token
	writeJSON(w, http.StatusOK, map[string]any{"id_token": h.cfg.Dev.Sign(c), "human": h.cfg.Dev.Human(body.Subject)})
}

func (h *host) logout(w http.ResponseWriter, r *http.Request, _ switchboard.Human) {
	if !h.jsonRequest(w, r) {
		return
	}
	h.endSession(w, r)
	w.WriteHeader(http.StatusNoContent)
}

func (h *host) publish(w http.ResponseWriter, r *http.Request, me switchboard.Human) {
	var body struct {
		Card         json.RawMessage `json:"card"`
		Discoverable bool            `json:"discoverable"`
	}
	if !h.read(w, r, &body) {
		return
	}
	id := r.PathValue("id")
	if strings.Contains(id, "@") {
		h.failCode(w, http.StatusBadRequest, "invalid_argument", "publish", "'@' is kept for agents of other hosts")
		return
	}
	card, err := agentcard.Parse(body.Card) // "switchboard: parse card: …", answered as invalid_argument
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := h.cfg.SB.Publish(r.Context(), switchboard.Persona{ID: id, Owner: me, Card: card, Discoverable: body.Discoverable})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (h *host) approvals(w http.ResponseWriter, r *http.Request, me switchboard.Human) {
	todos, err := h.cfg.SB.Approvals(r.Context(), me)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	type item struct {
		switchboard.Approval
		Text string `json:"text"` // the fixed-layout summary to show as is
	}
	out := []item{}
	for _, t := range todos {
		if t.Approval != nil {
			out = append(out, item{*t.Approval, t.Approval.Text()})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": out})
}

func (h *host) approve(w http.ResponseWriter, r *http.Request, me switchboard.Human) {
	var body struct {
		Scope switchboard.Scope `json:"scope,omitempty"` // narrower than requested; empty: as requested
	}
	if !h.read(w, r, &body) { // {} approves the scope as requested
		return
	}
	g, err := h.cfg.SB.Approve(r.Context(), me, r.PathValue("id"), body.Scope)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"grant": g})
}

func (h *host) deny(w http.ResponseWriter, r *http.Request, me switchboard.Human) {
	if !h.jsonRequest(w, r) {
		return
	}
	if err := h.cfg.SB.Deny(r.Context(), me, r.PathValue("id")); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *host) revoke(w http.ResponseWriter, r *http.Request, me switchboard.Human) {
	if !h.jsonRequest(w, r) {
		return
	}
	if err := h.cfg.SB.Revoke(r.Context(), me, r.PathValue("id")); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *host) block(w http.ResponseWriter, r *http.Request, me switchboard.Human) {
	var them switchboard.Human
	if !h.read(w, r, &them) {
		return
	}
	if err := h.cfg.SB.Block(r.Context(), me, them); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
