// Package mcptools serves switchboard's queue verbs as MCP tools, on the
// official MCP Go SDK: the vended endpoint an agent uses its grant through.
//
// The tools are create_for, list_todos, get_todo, claim, heartbeat,
// complete, fail and release, each with an input JSON schema and structured
// output. A session lists only the tools whose verb its grant holds on some
// queue, and every call authenticates the credential again, so a revoked or
// expired grant fails on the next call of a session that is already open.
// A refused call is an MCP tool error (IsError) whose text starts with the
// stable code of switchboard.StatusOf ("not_found: …"); a queue or todo the
// grant may not address reads exactly like one that does not exist.
//
// Over streamable HTTP, Handler authenticates every request and binds each
// session to the credential that opened it (see Handler); the agent's
// switchboard credential is its bearer token. For a grant bound to a key,
// the agent sends it as a DPoP token with a proof of every request (RFC
// 9449), which Handler checks and spends. Verifier is the bearer check for the SDK's own middleware, for a
// host that prefers it. Over stdio or in memory, set Options.Credential.
//
// This package is its own module so that the MCP SDK's dependencies reach
// only programs that serve MCP.
package mcptools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboardhq/switchboard"
)

// Options configure the tools. A nil *Options means the defaults.
type Options struct {
	// Implementation is how the server names itself to clients. Default
	// "switchboard".
	Implementation *mcp.Implementation
	// Credential, when set, is the credential every call acts with: for a
	// session over stdio or in memory. When empty, each call acts with the
	// bearer credential of its own HTTP request (see Handler and Verifier).
	Credential switchboard.Credential
	// MaxWait bounds how long a claim may wait for work. Default 1 minute.
	MaxWait time.Duration
	// Stream tunes the streamable HTTP handler that Handler builds; nil
	// means the SDK's defaults.
	Stream *mcp.StreamableHTTPOptions
	// URL is the endpoint's public URL, which DPoP proofs name (htu).
	// Required for DPoP: it is never taken from a request, whose Host
	// header the client chooses (a server an agent was tricked into
	// calling could relay its proof to you).
	URL string
}

// tool is one MCP tool: its name, the verb a grant must hold (on some
// queue) for it to be listed, what it does, its schemas and its call.
type tool struct {
	name    string
	verb    switchboard.Verb
	desc    string
	schemas [2]*jsonschema.Schema // input, output
	run     func(h *handlers, ctx context.Context, cred switchboard.Auth, args []byte) (any, error)
}

// tools is the one table of the tools.
var tools = []tool{
	{"create_for", switchboard.VerbCreateFor, "Hand work to the target persona: create a durable todo in one of its queues. A dedup_key makes the call idempotent.", createForSchemas, (*handlers).createFor},
	{"list_todos", switchboard.VerbList, "List a queue's todos in creation order (through a friend grant, only the todos that grant created or claimed).", listTodosSchemas, (*handlers).listTodos},
	{"get_todo", switchboard.VerbGet, "Read one todo by id.", getTodoSchemas, (*handlers).getTodo},
	{"claim", switchboard.VerbClaim, "Lease the next ready todo of a queue: highest priority, then oldest. Returns the todo and a lease whose token the lease verbs need.", claimSchemas, (*handlers).claim},
	{"heartbeat", switchboard.VerbHeartbeat, "Extend a lease on long work.", heartbeatSchemas, (*handlers).heartbeat},
	{"complete", switchboard.VerbComplete, "Finish a leased todo, recording its result.", completeSchemas, (*handlers).complete},
	{"fail", switchboard.VerbFail, "Give up on a leased todo; it is retried with backoff until its max attempts, then dead-lettered.", failSchemas, (*handlers).fail},
	{"release", switchboard.VerbRelease, "Hand a leased todo back unfinished, without counting a failure.", releaseSchemas, (*handlers).release},
	{"register_webhook", switchboard.VerbWebhook, "Register an HTTPS URL to be told how the todos this grant creates end (completed with the result, failed, dead, cancelled), signed per Standard Webhooks; a queue owner's own agent may also watch its queues for new todos (arrivals). Returns the signing secret, this once.", registerWebhookSchemas, (*handlers).registerWebhook},
	{"list_webhooks", switchboard.VerbWebhook, "List this grant's webhooks (without their secrets).", listWebhooksSchemas, (*handlers).listWebhooks},
	{"redrive_webhook", switchboard.VerbWebhook, "Send a webhook's dead deliveries again (after fixing the receiver), attempts reset.", redriveWebhookSchemas, (*handlers).redriveWebhook},
	{"delete_webhook", switchboard.VerbWebhook, "Delete one of this grant's webhooks; its undelivered deliveries are dropped.", deleteWebhookSchemas, (*handlers).deleteWebhook},
}

func (h *handlers) registerWebhook(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	var a struct {
		URL      string   `json:"url"`
		Arrivals []string `json:"arrivals,omitempty"`
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	w, secret, err := h.sb.RegisterWebhook(ctx, cred, a.URL, a.Arrivals...)
	if err != nil {
		return nil, err
	}
	return struct {
		Webhook switchboard.Webhook `json:"webhook"`
		Secret  string              `json:"secret"`
	}{w, secret}, nil
}

func (h *handlers) listWebhooks(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	var a struct{}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	ws, err := h.sb.Webhooks(ctx, cred)
	if err != nil {
		return nil, err
	}
	if ws == nil {
		ws = []switchboard.Webhook{}
	}
	return struct {
		Webhooks []switchboard.Webhook `json:"webhooks"`
	}{ws}, nil
}

func (h *handlers) redriveWebhook(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	var a struct {
		ID string `json:"id"`
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	n, err := h.sb.RedriveWebhook(ctx, cred, a.ID)
	if err != nil {
		return nil, err
	}
	return struct {
		Redriven int `json:"redriven"`
	}{n}, nil
}

func (h *handlers) deleteWebhook(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	var a struct {
		ID string `json:"id"`
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	if err := h.sb.DeleteWebhook(ctx, cred, a.ID); err != nil {
		return nil, err
	}
	return struct {
		OK bool `json:"ok"`
	}{true}, nil
}

// NewServer returns an MCP server with switchboard's queue tools.
func NewServer(sb *switchboard.Switchboard, opts *Options) *mcp.Server {
	srv, _ := newServer(sb, opts)
	return srv
}

func newServer(sb *switchboard.Switchboard, opts *Options) (*mcp.Server, *handlers) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Implementation == nil {
		o.Implementation = &mcp.Implementation{Name: "switchboard", Version: "1"}
	}
	if o.MaxWait <= 0 {
		o.MaxWait = time.Minute
	}
	h := &handlers{sb: sb, o: o}
	srv := mcp.NewServer(o.Implementation, nil)
	for _, t := range tools {
		srv.AddTool(&mcp.Tool{Name: t.name, Description: t.desc, InputSchema: t.schemas[0], OutputSchema: t.schemas[1]}, h.tool(t))
	}
	srv.AddReceivingMiddleware(h.listFilter)
	return srv, h
}

// Handler serves the tools over streamable HTTP, each request carrying the
// agent's credential as its bearer token (RFC 6750) or, for a grant bound
// to a key, as a DPoP token with a proof (RFC 9449): "Authorization: DPoP
// sbg_…" and a "DPoP" header holding a proof of this request (its method
// and Options.URL, which DPoP needs: without it DPoP requests are
// answered 501, since a URL built from the request would trust the
// client's Host header) over the credential.
//
// A DPoP request is checked here, whether or not it opens a session: its
// proof is verified and spent (switchboard.Prove), so it is good for this
// one HTTP request, and the tool calls it carries act with it. A refused
// proof is answered 401 with WWW-Authenticate: DPoP error=
// "invalid_dpop_proof" (or "use_dpop_nonce" and a DPoP-Nonce header when
// the host requires server nonces).
//
// Every request is authenticated, and a session belongs to the
// credential (and, for DPoP, the key) that opened it. A bearer request
// that opens a session (no Mcp-Session-Id), and every GET (the session's
// stream) and DELETE (its end), must carry a valid credential, else it is
// answered 401 with WWW-Authenticate: Bearer — error="invalid_token" for
// a credential that is unknown, revoked or expired, error=
// "invalid_request" for a malformed header, no error for none (RFC 6750
// §3) — or, when the credential's grant is bound to a key, with a DPoP
// challenge (error="invalid_token": it needs a proof). Each answer
// carries the JSON body every switchboard host answers errors with:
// {"error":{"code":"unauthenticated","message":"…"}}. A request naming a
// session with any credential but the one that opened it — another
// grant's, a revoked one, any other string, or the same one sent without
// its key's proofs — is refused (403, or 404 for a session that does not
// exist) and leaves the session as it was. A POST of a session with its
// own credential, revoked or expired since the session opened, reaches
// the tools, and each call fails as an MCP tool error
// ("unauthenticated: …") the client reads like any other refusal,
// instead of an HTTP error the MCP client would throw. Every tool call
// authenticates its own request's credential.
func Handler(sb *switchboard.Switchboard, opts *Options) http.Handler {
	srv, hs := newServer(sb, opts)
	var so *mcp.StreamableHTTPOptions
	if opts != nil {
		so = opts.Stream
	}
	h := bindSessions(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, so))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authz := r.Header.Get("Authorization")
		if authz == "" {
			unauthorized(w, "", "no credential: send it as the bearer token (Authorization: Bearer sbg_…)")
			return
		}
		f := strings.Fields(authz)
		var owner string // what the session this request opens or uses is bound to
		switch {
		case len(f) == 2 && strings.EqualFold(f[0], "dpop"):
			proofs := r.Header.Values("DPoP")
			if len(proofs) != 1 {
				dpopUnauthorized(w, sb, switchboard.ErrDPoPRequired, "send exactly one DPoP header with a proof of this request")
				return
			}
			if hs.o.URL == "" {
				// The URL a proof must name cannot come from the request
				// itself: its Host header is the client's to choose.
				serverError(w, switchboard.Status{HTTP: http.StatusNotImplemented, Code: "not_configured"}, "DPoP needs the endpoint's public URL: set mcptools.Options.URL")
				return
			}
			p := switchboard.Proof{JWT: proofs[0], Method: r.Method, URL: hs.o.URL}
			proven, err := sb.Prove(r.Context(), switchboard.Credential(f[1]), p)
			if err != nil {
				if st := switchboard.StatusOf(err); st.HTTP >= 500 {
					serverError(w, st, "the credential could not be checked")
					return
				}
				dpopUnauthorized(w, sb, err, "")
				return
			}
			// The tool calls this request carries act with proven, found
			// by the proof they came with (spent here, so unique).
			hs.proven.Store(proofs[0], proven)
			defer hs.proven.Delete(proofs[0])
			owner = sessionOwner("dpop", f[1], proven.KeyThumbprint())
		case len(f) != 2 || !strings.EqualFold(f[0], "bearer"):
			unauthorized(w, "invalid_request", "the Authorization header is not Bearer or DPoP and a credential")
			return
		default:
			owner = sessionOwner("bearer", f[1], "")
			if r.Header.Get("Mcp-Session-Id") != "" && r.Method == http.MethodPost {
				// A message of a session this credential opened (the
				// binding below refuses any other): its tool calls
				// authenticate it, so a credential revoked since the
				// session opened meets a tool error there.
				break
			}
			if _, err := sb.Authenticate(r.Context(), switchboard.Credential(f[1])); err != nil {
				if st := switchboard.StatusOf(err); st.HTTP >= 500 {
					serverError(w, st, "the credential could not be checked")
					return
				}
				if errors.Is(err, switchboard.ErrDPoPRequired) {
					dpopUnauthorized(w, sb, err, "the credential's grant is bound to a key: send it as a DPoP token with a proof")
					return
				}
				unauthorized(w, "invalid_token", "the credential is not valid (unknown, revoked or expired)")
				return
			}
		}
		h.ServeHTTP(w, withOwner(r, owner))
	})
}

// sessionOwner is what a session is bound to: how its credential is
// presented, the credential's SHA-256 (never the credential itself) and,
// for DPoP, the thumbprint of the key its proofs are signed with.
func sessionOwner(scheme, cred, jkt string) string {
	sum := sha256.Sum256([]byte(cred))
	return scheme + ":" + hex.EncodeToString(sum[:]) + ":" + jkt
}

type ownerKey struct{}
type authzKey struct{}

// withOwner is r, carrying owner as its bearer token for bindSessions (its
// own Authorization header is put back before the MCP handler sees it).
func withOwner(r *http.Request, owner string) *http.Request {
	r = r.Clone(context.WithValue(context.WithValue(r.Context(), ownerKey{}, owner), authzKey{}, r.Header.Get("Authorization")))
	r.Header.Set("Authorization", "Bearer "+owner)
	return r
}

// bindSessions gives each request the identity its session is bound to.
// The SDK's streamable handler binds a session to the auth.TokenInfo
// UserID of the request that opened it and refuses every later request
// of the session — POST, GET and DELETE — whose UserID differs (403), and
// auth.RequireBearerToken is how a request gets a TokenInfo: the request
// reaches it with its owner (sessionOwner) as its bearer token, and its
// own Authorization header is restored for the tools, which act with it.
func bindSessions(h http.Handler) http.Handler {
	restore := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", r.Context().Value(authzKey{}).(string))
		h.ServeHTTP(w, r)
	})
	return auth.RequireBearerToken(func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		owner, _ := ctx.Value(ownerKey{}).(string)
		if owner == "" || token != owner {
			return nil, fmt.Errorf("%w: no credential", auth.ErrInvalidToken)
		}
		// Every request is authenticated again: the expiry only
		// satisfies the middleware.
		return &auth.TokenInfo{UserID: owner, Expiration: time.Now().Add(time.Hour)}, nil
	}, nil)(restore)
}

func serverError(w http.ResponseWriter, st switchboard.Status, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st.HTTP)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": st.Code, "message": styled(st.Code, msg)}})
}

// styled is a refusal of the endpoint's own in switchboard's one error
// style, "switchboard: mcp: <code in words>: <detail>"; the library's
// errors (err.Error()) already read that way and pass as they are.
func styled(code, detail string) string {
	return "switchboard: mcp: " + strings.ReplaceAll(code, "_", " ") + ": " + detail
}

// quoted is s as an HTTP quoted-string (RFC 9110 §5.6.4): printable ASCII
// only, with '"' and '\' escaped; anything else — part of a message may
// quote what a client sent — becomes '?'.
func quoted(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			b.WriteByte('?')
		}
	}
	b.WriteByte('"')
	return b.String()
}

// unauthorized answers 401 with a Bearer challenge (RFC 6750 §3) and the
// JSON error body.
func unauthorized(w http.ResponseWriter, code, msg string) {
	challenge := "Bearer"
	if code != "" {
		challenge += fmt.Sprintf(`, error=%s, error_description=%s`, quoted(code), quoted(msg))
	}
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "unauthenticated", "message": styled("unauthenticated", msg)}})
}

// dpopUnauthorized answers 401 with a DPoP challenge (DPoPChallenge) and
// the JSON error body carrying switchboard's code.
func dpopUnauthorized(w http.ResponseWriter, sb *switchboard.Switchboard, err error, msg string) {
	code := switchboard.StatusOf(err).Code
	body := styled(code, msg)
	if msg == "" {
		msg, body = err.Error(), err.Error()
		if !errors.Is(err, switchboard.ErrDPoPRequired) && !errors.Is(err, switchboard.ErrInvalidDPoPProof) && !errors.Is(err, switchboard.ErrUseDPoPNonce) {
			msg = "the credential is not valid (unknown, revoked or expired)"
			body = styled(code, msg)
		}
	}
	DPoPChallenge(w.Header(), sb, err, msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": body}})
}

// DPoPChallenge sets the DPoP challenge (RFC 9449 §7.1) a 401 for err
// carries, for any route of a host that takes DPoP: WWW-Authenticate:
// DPoP with error="use_dpop_nonce" and a fresh DPoP-Nonce header for
// switchboard.ErrUseDPoPNonce, "invalid_dpop_proof" for a refused proof,
// and "invalid_token" otherwise (a bound credential sent without a proof,
// or one that is not valid); description, if not empty, is sent as
// error_description.
func DPoPChallenge(h http.Header, sb *switchboard.Switchboard, err error, description string) {
	code := "invalid_token"
	switch {
	case errors.Is(err, switchboard.ErrUseDPoPNonce):
		code = "use_dpop_nonce"
		h.Set("DPoP-Nonce", sb.DPoPNonce())
	case errors.Is(err, switchboard.ErrInvalidDPoPProof):
		code = "invalid_dpop_proof"
	}
	challenge := "DPoP error=" + quoted(code)
	if description != "" {
		challenge += ", error_description=" + quoted(description)
	}
	h.Set("WWW-Authenticate", challenge+", algs="+quoted(switchboard.DPoPAlgorithms))
}

// Verifier authenticates a switchboard credential presented as a bearer
// token, for auth.RequireBearerToken. The TokenInfo it returns names the
// grant (UserID, so the SDK binds a session to one grant; Extra "grant",
// "holder", "target"), lists the verbs the grant holds as Scopes, and has
// the grant's expiry as Expiration — for a grant that never expires, one
// hour from now, because the middleware refuses a zero expiration and every
// request is verified again anyway. A refused credential is
// auth.ErrInvalidToken (401) with a message that never holds the token.
func Verifier(sb *switchboard.Switchboard) auth.TokenVerifier {
	return func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		g, err := sb.Authenticate(ctx, switchboard.Credential(token))
		if err != nil {
			st := switchboard.StatusOf(err)
			if st.HTTP == http.StatusUnauthorized || st.HTTP == http.StatusBadRequest || st.HTTP == http.StatusNotFound {
				return nil, fmt.Errorf("%w: the credential is not valid (unknown, revoked or expired)", auth.ErrInvalidToken)
			}
			return nil, fmt.Errorf("switchboard: authenticate: %s", st.Code)
		}
		exp := g.ExpiresAt
		if exp.IsZero() {
			exp = time.Now().Add(time.Hour)
		}
		return &auth.TokenInfo{
			Scopes:     grantVerbs(g),
			Expiration: exp,
			UserID:     g.ID,
			Extra:      map[string]any{"grant": g.ID, "holder": g.Holder, "target": g.Target},
		}, nil
	}
}

func grantVerbs(g switchboard.Grant) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range g.Scope {
		for _, v := range e.Verbs {
			if !seen[string(v)] {
				seen[string(v)] = true
				out = append(out, string(v))
			}
		}
	}
	return out
}

type handlers struct {
	sb *switchboard.Switchboard
	o  Options
	// proven holds, while Handler serves a DPoP request, the Proven its
	// proof made, keyed by the proof.
	proven sync.Map
}

var errNoCredential = fmt.Errorf("%w: no credential: send it as the bearer token", switchboard.ErrUnauthenticated)

// credential is what a call acts with: Options.Credential, the bearer
// credential of its HTTP request, or the Proven Handler made of its DPoP
// request.
func (h *handlers) credential(extra *mcp.RequestExtra) (switchboard.Auth, error) {
	if h.o.Credential != "" {
		return h.o.Credential, nil
	}
	if extra == nil || extra.Header == nil {
		return nil, errNoCredential
	}
	f := strings.Fields(extra.Header.Get("Authorization"))
	switch {
	case len(f) == 2 && strings.EqualFold(f[0], "bearer"):
		return switchboard.Credential(f[1]), nil
	case len(f) == 2 && strings.EqualFold(f[0], "dpop"):
		if p, ok := h.proven.Load(extra.Header.Get("DPoP")); ok {
			if p := p.(switchboard.Proven); p.Credential() == switchboard.Credential(f[1]) {
				return p, nil
			}
		}
		return nil, fmt.Errorf("%w: a DPoP request is checked by Handler", switchboard.ErrDPoPRequired)
	}
	return nil, errNoCredential
}

// listFilter answers tools/list with the tools whose verb the caller's
// grant holds now.
func (h *handlers) listFilter(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil || method != "tools/list" {
			return res, err
		}
		lr, ok := res.(*mcp.ListToolsResult)
		if !ok {
			return res, nil
		}
		cred, err := h.credential(req.GetExtra())
		if err != nil {
			return nil, err
		}
		g, err := h.sb.Authenticate(ctx, cred)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", switchboard.StatusOf(err).Code, err)
		}
		held := map[string]bool{}
		for _, v := range grantVerbs(g) {
			held[v] = true
		}
		verb := map[string]string{}
		for _, t := range tools {
			verb[t.name] = string(t.verb)
		}
		kept := lr.Tools[:0:0]
		for _, t := range lr.Tools {
			if held[verb[t.Name]] {
				kept = append(kept, t)
			}
		}
		out := *lr
		out.Tools = kept
		return &out, nil
	}
}

// tool returns the handler of one tool: decode the arguments strictly,
// call switchboard with the request's credential, and answer structured
// output or a tool error.
func (h *handlers) tool(t tool) mcp.ToolHandler {
	name := t.name
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		cred, err := h.credential(req.Extra)
		if err != nil {
			return toolError(name, err), nil
		}
		args := []byte(req.Params.Arguments)
		if len(args) == 0 {
			args = []byte("{}")
		}
		out, err := t.run(h, ctx, cred, args)
		if err != nil {
			return toolError(name, err), nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("switchboard: %s: encode the result: %w", name, err)
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
			StructuredContent: json.RawMessage(b),
		}, nil
	}
}

// toolError is a refused call as an MCP tool error: the stable code, then
// the message (which never holds a secret), then when a retry can succeed.
// The message reads as switchboard's do, "switchboard: " once and then the
// verb: an error of the tool's own argument checks is given the tool's name.
func toolError(tool string, err error) *mcp.CallToolResult {
	st := switchboard.StatusOf(err)
	text := err.Error()
	if !strings.HasPrefix(text, "switchboard: ") {
		text = "switchboard: " + tool + ": " + text
	}
	msg := st.Code + ": " + text
	if !st.RetryAt.IsZero() {
		msg += " (retry after " + st.RetryAt.UTC().Format(time.RFC3339) + ")"
	}
	r := &mcp.CallToolResult{}
	r.SetError(errors.New(msg))
	return r
}

type leaseArgs struct {
	Todo  string `json:"todo"`
	Token string `json:"token"`
}

func (a leaseArgs) lease() switchboard.Lease {
	return switchboard.Lease{TodoID: a.Todo, Token: a.Token}
}

type okResult struct {
	OK bool `json:"ok"`
}

func (h *handlers) createFor(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	sb := h.sb
	queue, rest, err := splitQueue(args)
	if err != nil {
		return nil, err
	}
	var n switchboard.NewTodo
	if err := switchboard.DecodeJSON(rest, &n); err != nil {
		return nil, err
	}
	t, created, err := sb.CreateFor(ctx, cred, queue, n)
	if err != nil {
		return nil, err
	}
	return struct {
		Todo    switchboard.Todo `json:"todo"`
		Created bool             `json:"created"`
	}{t, created}, nil
}

func (h *handlers) listTodos(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	sb := h.sb
	var a struct {
		Queue string `json:"queue"`
		switchboard.ListOptions
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	todos, err := sb.List(ctx, cred, a.Queue, &a.ListOptions)
	if err != nil {
		return nil, err
	}
	limit := a.Limit
	if limit == 0 {
		limit = 100
	}
	res := struct {
		Todos     []switchboard.Todo `json:"todos"`
		NextAfter string             `json:"next_after,omitempty"`
	}{Todos: todos}
	if res.Todos == nil {
		res.Todos = []switchboard.Todo{}
	}
	if len(todos) == limit {
		res.NextAfter = todos[len(todos)-1].ID
	}
	return res, nil
}

func (h *handlers) getTodo(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	sb := h.sb
	var a struct {
		ID string `json:"id"`
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	t, err := sb.Get(ctx, cred, a.ID)
	if err != nil {
		return nil, err
	}
	return struct {
		Todo switchboard.Todo `json:"todo"`
	}{t}, nil
}

func (h *handlers) claim(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	sb := h.sb
	var a struct {
		Queue string `json:"queue"`
		Lease string `json:"lease,omitempty"`
		Wait  string `json:"wait,omitempty"`
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	lease, err := duration("lease", a.Lease)
	if err != nil {
		return nil, err
	}
	wait, err := duration("wait", a.Wait)
	if err != nil {
		return nil, err
	}
	if wait > h.o.MaxWait {
		return nil, fmt.Errorf("%w: wait is at most %s", switchboard.ErrInvalidArgument, h.o.MaxWait)
	}
	cctx := ctx
	if wait > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	t, l, err := sb.Claim(cctx, cred, a.Queue, &switchboard.ClaimOptions{Lease: lease, Wait: wait > 0})
	type claimed struct {
		Todo  *switchboard.Todo  `json:"todo,omitempty"`
		Lease *switchboard.Lease `json:"lease,omitempty"`
		Empty bool               `json:"empty"`
	}
	switch {
	case errors.Is(err, switchboard.ErrQueueEmpty),
		wait > 0 && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return claimed{Empty: true}, nil
	case err != nil:
		return nil, err
	}
	return claimed{Todo: &t, Lease: &l}, nil
}

func (h *handlers) heartbeat(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	sb := h.sb
	var a struct {
		leaseArgs
		Extend string `json:"extend,omitempty"`
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	d, err := duration("extend", a.Extend)
	if err != nil {
		return nil, err
	}
	l, err := sb.Heartbeat(ctx, cred, a.lease(), d)
	if err != nil {
		return nil, err
	}
	return struct {
		Lease switchboard.Lease `json:"lease"`
	}{l}, nil
}

func (h *handlers) complete(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	sb := h.sb
	var a struct {
		leaseArgs
		Result       json.RawMessage `json:"result,omitempty"`
		ResultBase64 []byte          `json:"result_base64,omitempty"`
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	if len(a.Result) > 0 && len(a.ResultBase64) > 0 {
		return nil, fmt.Errorf("%w: both result and result_base64 are set", switchboard.ErrInvalidArgument)
	}
	result := a.ResultBase64
	if len(a.Result) > 0 && string(a.Result) != "null" {
		result = a.Result
	}
	return okResult{true}, sb.Complete(ctx, cred, a.lease(), result)
}

func (h *handlers) fail(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	sb := h.sb
	var a struct {
		leaseArgs
		Reason string `json:"reason,omitempty"`
	}
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	return okResult{true}, sb.Fail(ctx, cred, a.lease(), a.Reason)
}

func (h *handlers) release(ctx context.Context, cred switchboard.Auth, args []byte) (any, error) {
	sb := h.sb
	var a leaseArgs
	if err := switchboard.DecodeJSON(args, &a); err != nil {
		return nil, err
	}
	return okResult{true}, sb.Release(ctx, cred, a.lease())
}

// splitQueue takes "queue" out of create_for's arguments, leaving a NewTodo.
func splitQueue(args []byte) (string, []byte, error) {
	var m map[string]json.RawMessage
	if err := switchboard.DecodeJSON(args, &m); err != nil {
		return "", nil, err
	}
	var queue string
	if raw, ok := m["queue"]; !ok {
		return "", nil, fmt.Errorf("%w: queue is required", switchboard.ErrInvalidArgument)
	} else if err := json.Unmarshal(raw, &queue); err != nil {
		return "", nil, fmt.Errorf("%w: queue is a string", switchboard.ErrInvalidArgument)
	}
	delete(m, "queue")
	rest, err := json.Marshal(m)
	return queue, rest, err
}

func duration(name, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%w: %s is a Go duration such as \"5m\"", switchboard.ErrInvalidArgument, name)
	}
	return d, nil
}
