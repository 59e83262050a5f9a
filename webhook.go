// Webhooks: the outcomes of the todos an agent created come back to it,
// pushed, signed per the Standard Webhooks specification, and delivered
// through the queue itself — each delivery is a todo in a reserved system
// queue, written in the same transaction as the change it reports.

package switchboard

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// VerbWebhook lets a grant's holder register webhooks for the outcomes of
// the todos it created in the queues where it holds this verb.
const VerbWebhook Verb = "webhook"

// WebhookConfig turns webhooks on (Config.Webhooks). The library sends
// deliveries from Run; it opens no listening socket.
type WebhookConfig struct {
	// Key derives each webhook's signing secret (HMAC-SHA256 of the
	// webhook's id), so no secret is ever stored: keep it as secret as a
	// database password, and the same across restarts. At least 32 bytes.
	Key []byte
	// Origins are the destinations allowed, as scheme://host[:port]
	// ("https://hooks.example.com"); a webhook's URL must be on one.
	Origins []string
	// AllowPrivate lets deliveries go to loopback, private, link-local and
	// other non-public addresses (checked on the address actually dialled,
	// after DNS). Off by default: an agent must not make the host call
	// into its own network.
	AllowPrivate bool
	// AllowHTTP allows http:// destinations; otherwise only https://.
	AllowHTTP bool
	// Client sends deliveries. Its Transport must be an *http.Transport
	// (or nil; any RoundTripper with AllowPrivate): it is cloned and given
	// the address check. Redirects are never followed. Nil: a default
	// client.
	Client *http.Client
	// MaxAttempts bounds the attempts of one delivery before it is dead
	// (the webhook's grant sends its dead deliveries again with
	// RedriveWebhook). Default 8.
	MaxAttempts int
	// Timeout bounds one attempt. Default 10 seconds.
	Timeout time.Duration
	// PerGrant bounds the webhooks one grant may hold. Default 4.
	PerGrant int
}

// Webhook is a registered destination.
type Webhook struct {
	ID     string `json:"id"`     // its id; also what its secret is derived from
	Grant  string `json:"grant"`  // the grant that registered it
	Holder string `json:"holder"` // that grant's agent
	URL    string `json:"url"`    // where deliveries go
	// Arrivals are the queues whose new todos it is told of
	// (todo.created), for a queue owner's own agent; see RegisterWebhook.
	Arrivals  []string  `json:"arrivals,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"` // when it was registered
}

// The webhook event types, in a delivery's body "type".
const (
	WebhookTodoCompleted = "todo.completed" // data: the todo, with its result
	WebhookTodoFailed    = "todo.failed"    // an attempt failed; the todo is queued again
	WebhookTodoDead      = "todo.dead"      // out of attempts
	WebhookTodoCancelled = "todo.cancelled" // cancelled (by the queue's owner, or a revocation)
	WebhookTodoCreated   = "todo.created"   // a todo arrived in a queue the webhook watches (Arrivals)
)

const (
	tWebhooks       = "webhooks"      // webhook id → Webhook
	tWebhookByGrant = "webhook_grant" // grant id \x00 webhook id → ""
	tWebhookByQueue = "webhook_queue" // queue key \x00 webhook id → "": arrivals watched
	// webhookQueue is the system queue of deliveries: its queue key is no
	// persona's ("p:") nor human's ("h:").
	webhookQueue    = "s:webhooks"
	webhookKind     = "webhook.delivery"
	webhookSecretV1 = "whsec_"
)

var (
	// ErrNoWebhooks: webhooks are not configured (Config.Webhooks).
	ErrNoWebhooks = errors.New("webhooks are not configured")
	// ErrWebhookSignature: VerifyWebhook found no valid signature, or a
	// timestamp outside the tolerance.
	ErrWebhookSignature = errors.New("webhook signature does not verify")
)

// delivery is a delivery todo's payload.
type delivery struct {
	Webhook string          `json:"webhook"`
	Type    string          `json:"type"`
	Body    json.RawMessage `json:"body"` // what is sent, byte for byte, on every attempt
}

func (c *WebhookConfig) withDefaults() (*WebhookConfig, error) {
	if c == nil {
		return nil, nil
	}
	o := *c
	if len(o.Key) < 32 {
		return nil, invalid("webhook key is %d bytes, at least 32", len(o.Key))
	}
	for _, s := range o.Origins {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.Path != "" || (u.Scheme != "https" && u.Scheme != "http") {
			return nil, invalid("webhook origin %q is not scheme://host[:port]", s)
		}
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.PerGrant <= 0 {
		o.PerGrant = 4
	}
	if o.Client != nil && o.Client.Transport != nil && !o.AllowPrivate {
		if _, ok := o.Client.Transport.(*http.Transport); !ok {
			return nil, invalid("WebhookConfig.Client's Transport is a %T: the check that deliveries go to public addresses needs an *http.Transport (or nil), unless AllowPrivate", o.Client.Transport)
		}
	}
	o.Client = safeClient(o.Client, o.AllowPrivate)
	return &o, nil
}

// safeClient is c (or a default client) sending only to public addresses
// unless allowPrivate, following no redirect.
func safeClient(c *http.Client, allowPrivate bool) *http.Client {
	out := &http.Client{}
	if c != nil {
		*out = *c
	}
	var tr *http.Transport
	switch t := out.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	}
	if tr != nil {
		d := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip := net.ParseIP(host)
			if ip == nil {
				return fmt.Errorf("%w: webhook destination %s is no IP address", ErrForbidden, host)
			}
			if !allowPrivate && !publicIP(ip) {
				return fmt.Errorf("%w: webhook destination %s is not a public address (WebhookConfig.AllowPrivate allows it)", ErrForbidden, ip)
			}
			return nil
		}}
		tr.DialContext = d.DialContext
		tr.Proxy = nil // the check is on the address dialled: a proxy would hide it
		out.Transport = tr
	}
	out.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return out
}

// publicIP reports whether ip is a public unicast address.
func publicIP(ip net.IP) bool {
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() ||
		ip.Equal(net.IPv4bcast) || (ip.To4() != nil && ip.To4()[0] == 100 && ip.To4()[1]&0xc0 == 64)) // CGNAT 100.64/10
}

// webhookSecret derives a webhook's signing secret: "whsec_" and the
// base64 of HMAC-SHA256(key, id), the form Standard Webhooks libraries take.
func (s *Switchboard) webhookSecret(id string) string {
	m := hmac.New(sha256.New, s.cfg.Webhooks.Key)
	m.Write([]byte("switchboard webhook secret\x00" + id))
	return webhookSecretV1 + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// checkWebhookURL refuses a destination outside the allowed origins.
func (s *Switchboard) checkWebhookURL(raw string) (string, error) {
	// No message quotes the URL: its userinfo, query or fragment may be
	// the receiver's secret, and errors reach logs and agents.
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" {
		return "", invalid("webhook url is not an absolute URL without credentials or fragment")
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && s.cfg.Webhooks.AllowHTTP) {
		return "", invalid("webhook url must be https")
	}
	if len(raw) > 2048 {
		return "", invalid("webhook url is %d bytes, limit 2048", len(raw))
	}
	origin := u.Scheme + "://" + u.Host
	for _, o := range s.cfg.Webhooks.Origins {
		if strings.EqualFold(o, origin) {
			return u.String(), nil
		}
	}
	return "", fmt.Errorf("%w: webhook origin %s is not allowed by this host", ErrForbidden, origin)
}

// RegisterWebhook registers url to receive the outcomes of the todos the
// credential's grant creates (in queues where it holds VerbWebhook), and
// returns the webhook and its signing secret — shown this once; the host
// stores no secret (it is derived from WebhookConfig.Key). Deliveries carry
// the Standard Webhooks headers; receivers check them with VerifyWebhook
// or any Standard Webhooks library.
//
// arrivals names queues whose every new todo (todo.created) the webhook is
// told of too — work arriving for an agent that holds no blocking claim.
// Only a queue owner's own agent may watch a queue: a Vend grant whose
// holder is the queue's persona, holding VerbWebhook on it; anyone else's
// request is ErrForbidden.
//
// Errors: ErrNoWebhooks without Config.Webhooks; ErrForbidden for a grant
// without VerbWebhook or a URL whose origin is not in
// WebhookConfig.Origins; ErrInvalidArgument for a URL that is not
// absolute http(s) or carries userinfo; ErrQuotaExceeded past
// WebhookConfig.PerGrant. Errors never quote the URL. Give each webhook its
// own URL (a path of its own): a receiver picks the secret to verify with
// before it can trust the body.
func (s *Switchboard) RegisterWebhook(ctx context.Context, c Auth, rawURL string, arrivals ...string) (Webhook, string, error) {
	fail := func(err error) (Webhook, string, error) {
		return Webhook{}, "", fmt.Errorf("switchboard: register webhook: %w", err)
	}
	if s.cfg.Webhooks == nil {
		return fail(ErrNoWebhooks)
	}
	u, err := s.checkWebhookURL(rawURL)
	if err != nil {
		return fail(err)
	}
	var w Webhook
	err = s.update(ctx, func(t *txn) error {
		g, err := t.webhookGrant(c)
		if err != nil {
			return err
		}
		n := 0
		if err := t.scanPrefix(tWebhookByGrant, g.ID+sep, func(string, string) (bool, error) { n++; return true, nil }); err != nil {
			return err
		}
		if n >= s.cfg.Webhooks.PerGrant {
			return fmt.Errorf("%w: the grant holds %d webhooks, limit %d", ErrQuotaExceeded, n, s.cfg.Webhooks.PerGrant)
		}
		w = Webhook{ID: newID("whk"), Grant: g.ID, Holder: g.Holder, URL: u, CreatedAt: t.now}
		for _, q := range arrivals {
			if g.EdgeID != "" || g.Holder != g.Target || !g.Scope.Allows(q, VerbWebhook) || q == ApprovalsQueue {
				return fmt.Errorf("%w: only the queue owner's own agent, holding %s on it, may watch queue %q", ErrForbidden, VerbWebhook, q)
			}
			if !slices.Contains(w.Arrivals, q) {
				w.Arrivals = append(w.Arrivals, q)
			}
		}
		if err := t.put(tWebhooks, w.ID, w); err != nil {
			return err
		}
		if err := t.putRaw(tWebhookByGrant, g.ID+sep+w.ID, ""); err != nil {
			return err
		}
		for _, q := range w.Arrivals {
			if err := t.putRaw(tWebhookByQueue, queueKey(&g.Grant, q)+sep+w.ID, ""); err != nil {
				return err
			}
		}
		return t.emit(Event{Type: EventWebhookRegistered, Actor: agentActor(g.Holder), Persona: g.Holder, Grant: g.ID, Detail: w.ID})
	})
	if err != nil {
		return fail(err)
	}
	return w, s.webhookSecret(w.ID), nil
}

// webhookGrant authenticates c for the webhook verbs: its grant must hold
// VerbWebhook on some queue. Every webhook call goes through it.
func (t *txn) webhookGrant(c Auth) (*grantRec, error) {
	g, err := t.authenticate(c)
	if err != nil {
		return nil, err
	}
	if !grantHolds(g.Scope, VerbWebhook) {
		return nil, fmt.Errorf("%w: grant does not allow %s", ErrForbidden, VerbWebhook)
	}
	return g, nil
}

// ownWebhook authenticates c for the webhook verbs and loads webhook id of
// its grant; another grant's webhook is ErrNotFound, like one that does not
// exist.
func (t *txn) ownWebhook(c Auth, id string) (*grantRec, Webhook, error) {
	g, err := t.webhookGrant(c)
	if err != nil {
		return nil, Webhook{}, err
	}
	var w Webhook
	if err := t.get(tWebhooks, id, &w, "webhook"); err != nil {
		return nil, Webhook{}, err
	}
	if w.Grant != g.ID {
		return nil, Webhook{}, notFound("webhook")
	}
	return g, w, nil
}

func grantHolds(sc Scope, v Verb) bool {
	for _, e := range sc {
		if sc.Allows(e.Queue, v) {
			return true
		}
	}
	return false
}

// Webhooks lists the webhooks of the credential's grant.
func (s *Switchboard) Webhooks(ctx context.Context, c Auth) ([]Webhook, error) {
	var out []Webhook
	err := s.view(ctx, func(t *txn) error {
		g, err := t.webhookGrant(c)
		if err != nil {
			return err
		}
		out, err = t.webhooksOf(g.ID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("switchboard: webhooks: %w", err)
	}
	return out, nil
}

func (t *txn) webhooksOf(grantID string) ([]Webhook, error) {
	var ids []string
	if err := t.scanPrefix(tWebhookByGrant, grantID+sep, func(k, _ string) (bool, error) {
		ids = append(ids, k[len(grantID)+1:])
		return true, nil
	}); err != nil {
		return nil, err
	}
	out := make([]Webhook, 0, len(ids))
	for _, id := range ids {
		var w Webhook
		if err := t.get(tWebhooks, id, &w, "webhook"); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// DeleteWebhook removes one of the grant's webhooks: its undelivered
// deliveries are dropped when they come up. Another grant's webhook is
// ErrNotFound.
func (s *Switchboard) DeleteWebhook(ctx context.Context, c Auth, id string) error {
	err := s.update(ctx, func(t *txn) error {
		g, w, err := t.ownWebhook(c, id)
		if err != nil {
			return err
		}
		return t.dropWebhook(w, agentActor(g.Holder))
	})
	if err != nil {
		return fmt.Errorf("switchboard: delete webhook: %w", err)
	}
	return nil
}

// RedriveWebhook puts the dead deliveries of one of the grant's webhooks
// back in the delivery queue, their attempts reset — once the receiver is
// fixed — and returns how many. Another grant's webhook is ErrNotFound.
func (s *Switchboard) RedriveWebhook(ctx context.Context, c Auth, id string) (int, error) {
	n := 0
	err := s.update(ctx, func(t *txn) error {
		n = 0
		g, w, err := t.ownWebhook(c, id)
		if err != nil {
			return err
		}
		var ids []string
		if err := t.scanPrefix(tIdx, idxKey(idxGrant, g.ID, ""), func(_, v string) (bool, error) {
			ids = append(ids, v)
			return true, nil
		}); err != nil {
			return err
		}
		for _, tid := range ids {
			r, err := t.todo(tid)
			if err != nil {
				return err
			}
			if r.QueueKey != webhookQueue || r.State != TodoDead {
				continue
			}
			var d delivery
			if json.Unmarshal(r.Payload, &d) != nil || d.Webhook != w.ID {
				continue
			}
			if err := t.redrive(r, agentActor(g.Holder), g.ID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("switchboard: redrive webhook: %w", err)
	}
	return n, nil
}

func (t *txn) dropWebhook(w Webhook, actor string) error {
	if err := t.del(tWebhooks, w.ID); err != nil {
		return err
	}
	for _, q := range w.Arrivals {
		// Arrivals are only ever the holder's own queues (RegisterWebhook).
		if err := t.del(tWebhookByQueue, queueKey(&Grant{Target: w.Holder}, q)+sep+w.ID); err != nil {
			return err
		}
	}
	if err := t.del(tWebhookByGrant, w.Grant+sep+w.ID); err != nil {
		return err
	}
	return t.emit(Event{Type: EventWebhookDeleted, Actor: actor, Persona: w.Holder, Grant: w.Grant, Detail: w.ID})
}

// dropWebhooksOf removes every webhook of a grant (at its revocation).
func (t *txn) dropWebhooksOf(grantID, actor string) error {
	ws, err := t.webhooksOf(grantID)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if err := t.dropWebhook(w, actor); err != nil {
			return err
		}
	}
	return nil
}

// notifyWebhooks queues a delivery to each webhook of the grant that
// created r, in this transaction, when that grant holds VerbWebhook on r's
// queue. A system todo (a delivery itself) reports to nobody.
func (t *txn) notifyWebhooks(r *todoRec, typ string) error {
	if !t.hooks || r.Origin.Grant == "" || r.QueueKey == webhookQueue {
		return nil
	}
	prefix := r.Origin.Grant + sep
	if !t.anyIn(tWebhookByGrant, []byte(prefix), prefixEnd(prefix)) {
		return nil
	}
	g, err := getHot[grantRec](t, tGrants, r.Origin.Grant, "grant")
	if err != nil {
		return err
	}
	if !g.live(t.now) || !g.Scope.Allows(r.Queue, VerbWebhook) {
		return nil
	}
	ws, err := t.webhooksOf(g.ID)
	if err != nil {
		return err
	}
	body, err := t.deliveryBody(typ, seenBy(g, r)) // a friend's webhook: as its agent sees it
	if err != nil {
		return err
	}
	for _, w := range ws {
		if err := t.queueDelivery(w, typ, body); err != nil {
			return err
		}
	}
	return nil
}

// notifyArrival queues a delivery of a new todo to each webhook watching
// its queue, in the transaction that created it.
func (t *txn) notifyArrival(r *todoRec) error {
	if !t.hooks || r.QueueKey == webhookQueue {
		return nil
	}
	prefix := r.QueueKey + sep
	if !t.anyIn(tWebhookByQueue, []byte(prefix), prefixEnd(prefix)) {
		return nil
	}
	var ids []string
	if err := t.scanPrefix(tWebhookByQueue, prefix, func(k, _ string) (bool, error) {
		ids = append(ids, k[len(prefix):])
		return true, nil
	}); err != nil {
		return err
	}
	body, err := t.deliveryBody(WebhookTodoCreated, r.Todo) // arrivals: the owner's own agents only
	if err != nil {
		return err
	}
	for _, id := range ids {
		var w Webhook
		if err := t.get(tWebhooks, id, &w, "webhook"); err != nil {
			return err
		}
		g, err := viewHot[grantRec](t, tGrants, w.Grant, "grant")
		if err != nil && !isNotFound(err) {
			return err
		}
		if err != nil || !g.live(t.now) {
			continue // its grant expired at this instant (Reap drops the webhook)
		}
		if err := t.queueDelivery(w, WebhookTodoCreated, body); err != nil {
			return err
		}
	}
	return nil
}

// deliveryBody is what a delivery of an event about td sends, byte for
// byte on every attempt.
func (t *txn) deliveryBody(typ string, td Todo) ([]byte, error) {
	return json.Marshal(map[string]any{"type": typ, "timestamp": t.now.Format(time.RFC3339Nano), "data": map[string]any{"todo": td}})
}

// queueDelivery inserts one delivery of body to w: a todo of the system
// queue, attributed to w's grant (so revoking it cancels the delivery).
func (t *txn) queueDelivery(w Webhook, typ string, body []byte) error {
	p, err := json.Marshal(delivery{Webhook: w.ID, Type: typ, Body: body})
	if err != nil {
		return err
	}
	_, err = t.insertTodo(todoRec{Todo: Todo{
		Queue: webhookQueue, Kind: webhookKind, Payload: p, MaxAttempts: t.hookAttempts,
		Origin: Origin{Agent: w.Holder, Grant: w.Grant},
	}, QueueKey: webhookQueue}, systemActor, true)
	return err
}

// SignWebhook is the Standard Webhooks signature of a delivery: "v1," and
// the base64 of HMAC-SHA256 over "id.timestamp.body", keyed by the secret
// (its "whsec_" prefix removed, then base64-decoded).
func SignWebhook(secret, id string, ts time.Time, body []byte) (string, error) {
	sig, err := signWebhook(secret, id, ts, body)
	if err != nil {
		return "", fmt.Errorf("switchboard: sign webhook: %w", err)
	}
	return sig, nil
}

func signWebhook(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, webhookSecretV1))
	if err != nil {
		return "", fmt.Errorf("%w: webhook secret is not whsec_ and base64", ErrInvalidArgument)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.", id, ts.Unix())
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)), nil
}

// VerifyWebhook checks a received delivery for a Go receiver: the
// webhook-id, webhook-timestamp (within tolerance of now; 5 minutes if
// zero) and webhook-signature headers, against the raw body. It returns
// the message id, the key to deduplicate on (deliveries are at least
// once), or an error matching ErrWebhookSignature.
func VerifyWebhook(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) (string, error) {
	id, err := verifyWebhook(secret, h, body, now, tolerance)
	if err != nil {
		return "", fmt.Errorf("switchboard: verify webhook: %w", err)
	}
	return id, nil
}

func verifyWebhook(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) (string, error) {
	if tolerance == 0 {
		tolerance = 5 * time.Minute
	}
	id, tsRaw, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || tsRaw == "" || sigs == "" {
		return "", fmt.Errorf("%w: missing webhook headers", ErrWebhookSignature)
	}
	sec, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: webhook-timestamp %q", ErrWebhookSignature, tsRaw)
	}
	ts := time.Unix(sec, 0)
	if now.Sub(ts) > tolerance || ts.Sub(now) > tolerance {
		return "", fmt.Errorf("%w: webhook-timestamp is %s from now", ErrWebhookSignature, now.Sub(ts).Round(time.Second))
	}
	want, err := signWebhook(secret, id, ts, body)
	if err != nil {
		return "", err
	}
	for _, sig := range strings.Fields(sigs) {
		if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1 {
			return id, nil
		}
	}
	return "", ErrWebhookSignature
}

// WebhookDelivery is one webhook delivery as a Go receiver gets it from
// ReceiveWebhook (or ParseWebhook): checked against the webhook's secret,
// then decoded. Its body on the wire is
// {"type", "timestamp", "data": {"todo"}}, per Standard Webhooks.
type WebhookDelivery struct {
	// ID is the webhook-id header: the same on every attempt of one
	// delivery, so the key to deduplicate on (deliveries are at least
	// once).
	ID string
	// Type is what happened: WebhookTodoCompleted, WebhookTodoFailed,
	// WebhookTodoDead, WebhookTodoCancelled or WebhookTodoCreated.
	Type string
	// Timestamp is when it happened (the commit that ended the todo),
	// not when this attempt was sent.
	Timestamp time.Time
	// Todo is the todo as the webhook's agent sees it (Get through its
	// grant), with its result once done: ResultOf decodes it.
	Todo Todo
}

// maxWebhookBody bounds what ReceiveWebhook reads: far above what a
// delivery of a todo holding the largest payload and result the default
// Limits allow (base64 in JSON) takes.
const maxWebhookBody = 8 << 20

// ReceiveWebhook is a Go receiver's whole check of a delivery: it reads
// r's body (at most 8 MiB), checks the webhook-id, webhook-timestamp
// (within 5 minutes of now) and webhook-signature headers against it with
// the webhook's secret, as VerifyWebhook does, and decodes it:
//
//	d, err := switchboard.ReceiveWebhook(r, secret, time.Now())
//	if err != nil { http.Error(w, "bad delivery", http.StatusUnauthorized); return }
//	// d.ID to deduplicate on, d.Type, d.Todo (switchboard.ResultOf[T](d.Todo))
//
// A body that fails the check is ErrWebhookSignature and is never decoded;
// a signed body that does not decode as a delivery is ErrInvalidArgument.
// Answer 2xx once the delivery is handled (or recorded to be): anything
// else is retried with backoff.
func ReceiveWebhook(r *http.Request, secret string, now time.Time) (WebhookDelivery, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
	if err != nil {
		return WebhookDelivery{}, fmt.Errorf("switchboard: receive webhook: reading the body: %w", err)
	}
	if len(body) > maxWebhookBody {
		return WebhookDelivery{}, fmt.Errorf("switchboard: receive webhook: %w", invalid("body over %d bytes", maxWebhookBody))
	}
	d, err := parseWebhook(secret, r.Header, body, now, 0)
	if err != nil {
		return WebhookDelivery{}, fmt.Errorf("switchboard: receive webhook: %w", err)
	}
	return d, nil
}

// ParseWebhook is ReceiveWebhook for a body already read: VerifyWebhook's
// check (tolerance 0 means 5 minutes), then the delivery decoded.
func ParseWebhook(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) (WebhookDelivery, error) {
	d, err := parseWebhook(secret, h, body, now, tolerance)
	if err != nil {
		return WebhookDelivery{}, fmt.Errorf("switchboard: parse webhook: %w", err)
	}
	return d, nil
}

func parseWebhook(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) (WebhookDelivery, error) {
	id, err := verifyWebhook(secret, h, body, now, tolerance)
	if err != nil {
		return WebhookDelivery{}, err
	}
	// Decoded leniently (unknown members ignored): a receiver built
	// against this release keeps working when a newer host adds fields.
	var wire struct {
		Type      string    `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		Data      struct {
			Todo *Todo `json:"todo"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return WebhookDelivery{}, invalid("delivery %s does not decode: %v", id, err)
	}
	if wire.Type == "" || wire.Data.Todo == nil {
		return WebhookDelivery{}, invalid("delivery %s has no type or no todo", id)
	}
	return WebhookDelivery{ID: id, Type: wire.Type, Timestamp: wire.Timestamp, Todo: *wire.Data.Todo}, nil
}

// ---- delivery

// systemGrant is whom the delivery runner claims as.
var systemGrant = &grantRec{Grant: Grant{ID: "system", Holder: "switchboard", State: GrantActive}}

// deliverLoop sends deliveries until ctx ends: claim a few, send each,
// complete or fail it; wait for the next commit to the queue or a poll.
func (s *Switchboard) deliverLoop(ctx context.Context) {
	wc := s.cfg.Webhooks
	lease := 2*wc.Timeout + 5*time.Second
	for ctx.Err() == nil {
		woken := s.wake.wait(webhookQueue)
		var batch []Claimed
		err := s.updateLocked(ctx, func(t *txn) error {
			var err error
			batch, err = s.claimIn(t, systemGrant, webhookQueue, deliveryBatch, lease)
			return err
		})
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "switchboard: claiming webhook deliveries failed", slog.String("error", err.Error()))
		}
		outcomes := make([]deliveryOutcome, len(batch))
		var wg sync.WaitGroup
		for i, cl := range batch {
			wg.Go(func() { outcomes[i] = s.deliver(ctx, cl) })
		}
		wg.Wait()
		if len(batch) > 0 {
			s.endDeliveries(ctx, batch, outcomes)
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-woken:
		case <-s.cfg.Clock.After(s.cfg.PollInterval):
		}
	}
}

// deliveryBatch is how many deliveries the loop claims, sends at once and
// records in one transaction.
const deliveryBatch = 16

// deliveryOutcome is how one attempt went: done, cancelled (the webhook or
// its grant is gone) or attemptFailed, with the reason.
type deliveryOutcome struct {
	state   TodoState
	reason  string
	webhook string // its id, for the log
}

// deliver sends one delivery and says how it went.
func (s *Switchboard) deliver(ctx context.Context, cl Claimed) deliveryOutcome {
	var d delivery
	var w Webhook
	err := json.Unmarshal(cl.Todo.Payload, &d)
	if err == nil {
		err = s.view(ctx, func(t *txn) error {
			if err := t.get(tWebhooks, d.Webhook, &w, "webhook"); err != nil {
				return err
			}
			g, _, err := t.grantWithEdge(w.Grant)
			if err != nil {
				return err
			}
			if !g.live(t.now) {
				return notFound("grant")
			}
			return nil
		})
	}
	if err != nil {
		// The webhook was deleted, or its grant revoked: drop it.
		return deliveryOutcome{TodoCancelled, "webhook gone: " + err.Error(), d.Webhook}
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.Webhooks.Timeout)
	defer cancel()
	status, err := s.send(actx, w, cl.Todo.ID, d.Body)
	switch {
	case err == nil && status/100 == 2:
		return deliveryOutcome{TodoDone, "", d.Webhook}
	case err != nil:
		// The reason is stored and audited: net/http's errors quote the
		// URL, whose path or query may hold the receiver's own secret
		// (a token in a hook URL), so only the cause is kept.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return deliveryOutcome{attemptFailed, redactURL(err.Error(), w.URL), d.Webhook}
	}
	return deliveryOutcome{attemptFailed, "HTTP " + strconv.Itoa(status), d.Webhook}
}

// redactURL takes the webhook's URL out of a delivery's failure reason —
// whole, and its path and query, which may hold the receiver's secret — for
// a transport that quotes it inside its own error (a retrying or
// instrumenting RoundTripper wraps net/http's).
func redactURL(reason, rawURL string) string {
	reason = strings.ReplaceAll(reason, rawURL, "(the webhook's URL)")
	if u, err := url.Parse(rawURL); err == nil {
		if rest := u.RequestURI(); len(rest) > 1 {
			reason = strings.ReplaceAll(reason, rest, "(the webhook's path)")
		}
	}
	return reason
}

// send POSTs the body to the webhook, signed, and returns the status.
func (s *Switchboard) send(ctx context.Context, w Webhook, id string, body []byte) (int, error) {
	now := s.now()
	sig, err := SignWebhook(s.webhookSecret(w.ID), id, now, body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "switchboard-webhooks")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := s.cfg.Webhooks.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

// endDeliveries records the outcomes of a batch under their leases, in
// one transaction: done, cancelled, or failed (queued again after backoff,
// dead after the last attempt). A lost lease changes nothing (the lease ran
// out and the delivery is someone else's now).
func (s *Switchboard) endDeliveries(ctx context.Context, batch []Claimed, outcomes []deliveryOutcome) {
	for i, o := range outcomes {
		if o.state == attemptFailed {
			// The host's one place to see that a receiver is unreachable
			// (the reason is also the delivery's recorded error). The
			// reason never quotes the URL (see deliver).
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "switchboard: a webhook delivery failed; it is retried with backoff until its last attempt",
				slog.String("webhook", o.webhook), slog.String("delivery", batch[i].Todo.ID),
				slog.Int("attempt", batch[i].Lease.Attempt), slog.String("reason", clipReason(o.reason)))
		}
	}
	err := s.update(ctx, func(t *txn) error {
		for i, cl := range batch {
			if err := t.endDelivery(cl, outcomes[i].state, clipReason(outcomes[i].reason)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "switchboard: recording webhook deliveries failed; they are sent again when their leases end",
			slog.Int("deliveries", len(batch)), slog.String("error", err.Error()))
	}
}

func (t *txn) endDelivery(cl Claimed, state TodoState, reason string) error {
	r, err := t.todo(cl.Todo.ID)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.State != TodoLeased || subtle.ConstantTimeCompare([]byte(r.LeaseToken), []byte(cl.Lease.Token)) != 1 {
		return nil
	}
	switch state {
	case TodoDone:
		return t.endTodo(r, TodoDone, AttemptCompleted, systemActor, "")
	case TodoCancelled:
		return t.endTodo(r, TodoCancelled, AttemptCancelled, systemActor, reason)
	}
	r.Error = reason
	if r.Attempts >= r.MaxAttempts {
		return t.endTodo(r, TodoDead, AttemptFailed, systemActor, reason)
	}
	if err := t.requeue(r, t.now.Add(backoff(r.Attempts)), AttemptFailed, reason); err != nil {
		return err
	}
	return t.emit(Event{Type: EventTodoFailed, Actor: systemActor, Grant: r.Origin.Grant, Todo: r.ID, Queue: r.address(), Detail: reason})
}

// attemptFailed is no todo state: it tells endDelivery the attempt failed.
const attemptFailed TodoState = "failed"

func clipReason(s string) string {
	if len(s) > 500 {
		s = s[:500]
	}
	return strings.ToValidUTF8(s, "")
}
