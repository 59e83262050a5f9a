// The remote directory: cards fetched from allow-listed origins' well-known
// path, cached.

package switchboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/store"
)

// NewLocalDirectory is the directory of personas published in st: only
// discoverable ones resolve, by persona id. It is the default directory of a
// Switchboard on st.
func NewLocalDirectory(st store.Store) Directory { return localDirectory{st} }

type localDirectory struct{ st store.Store }

func (d localDirectory) view(ctx context.Context, fn func(*txn) error) error {
	return d.st.View(ctx, func(tx store.Tx) error {
		t := &txn{tx: tx}
		t.lg = logLayout.In(tx, nil)
		return fn(t)
	})
}

func (d localDirectory) Lookup(ctx context.Context, id string) (Listing, error) {
	l, err := d.lookup(ctx, id)
	return l, wrapErr("lookup", err)
}

func (d localDirectory) lookup(ctx context.Context, id string) (Listing, error) {
	var l Listing
	err := d.view(ctx, func(t *txn) error {
		p, err := t.discoverable(id)
		if err != nil {
			return named(err, "persona", id)
		}
		l = Listing{ID: p.ID, Card: p.Card}
		return nil
	})
	return l, err
}

func (d localDirectory) Search(ctx context.Context, q Query) ([]Listing, error) {
	ls, err := d.search(ctx, q)
	return ls, wrapErr("search", err)
}

func (d localDirectory) search(ctx context.Context, q Query) ([]Listing, error) {
	if err := q.normalize(); err != nil {
		return nil, err
	}
	var out []Listing
	err := d.view(ctx, func(t *txn) error {
		return t.scanPrefix(tPersonas, "", func(_, v string) (bool, error) {
			var r personaRec
			if err := r.loadStored([]byte(v)); err != nil {
				return false, fmt.Errorf("decode persona: %w", err)
			}
			p := r.Persona
			if p.Discoverable && q.match(p.Card) {
				out = append(out, Listing{ID: p.ID, Card: p.Card})
			}
			return len(out) < q.Limit, nil
		})
	})
	return out, err
}

// RemoteOptions configure a RemoteDirectory.
type RemoteOptions struct {
	// Origins is the allow-list: scheme://host[:port] values such as
	// "https://agents.example.com". No other origin is ever contacted.
	Origins []string
	// Client makes the requests. Default: a client with a 10 second
	// timeout. Redirects are followed only within the same origin.
	Client *http.Client
	// Timeout bounds one fetch. Default 5 seconds.
	Timeout time.Duration
	// MaxBytes bounds a card response. Default agentcard.MaxBytes (256 KiB).
	MaxBytes int
	// LegacyPath also tries /.well-known/agent.json (v0.2-era peers) when
	// /.well-known/agent-card.json is not found.
	LegacyPath bool
	// Trust is the signature policy and the keys trusted for this
	// directory's cards.
	Trust agentcard.Trust
	// Clock times cache entries. Default the system clock.
	Clock Clock
	// MaxAge caps how long a card is cached, whatever the server says.
	// Default 1 hour.
	MaxAge time.Duration
	// RetryAfter is how long a failed fetch is remembered before the origin
	// is asked again, so lookups and searches do not hammer an origin that is
	// down or serving bad cards. Default 30 seconds.
	RetryAfter time.Duration
}

// RemoteDirectory finds agents by fetching their cards from the A2A
// well-known path (/.well-known/agent-card.json) of allow-listed origins.
// The id of a remote listing is its origin. Responses are cached in memory,
// honouring Cache-Control max-age (no-store: not cached; no-cache or no
// max-age: revalidated on every lookup) and revalidated with If-None-Match
// when the server sent an ETag. It is safe for concurrent use.
type RemoteDirectory struct {
	o       RemoteOptions
	origins map[string]bool
	client  *http.Client

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	card    agentcard.Card
	etag    string
	expires time.Time
	err     error // a remembered failure, until expires
}

// NewRemoteDirectory checks o and returns the directory.
func NewRemoteDirectory(o RemoteOptions) (*RemoteDirectory, error) {
	d, err := newRemoteDirectory(o)
	if err != nil {
		return nil, fmt.Errorf("switchboard: remote directory: %w", inner(err))
	}
	return d, nil
}

func newRemoteDirectory(o RemoteOptions) (*RemoteDirectory, error) {
	if len(o.Origins) == 0 {
		return nil, invalid("a remote directory needs at least one origin")
	}
	d := &RemoteDirectory{o: o, origins: map[string]bool{}, cache: map[string]cached{}}
	for _, s := range o.Origins {
		origin, err := parseOrigin(s)
		if err != nil {
			return nil, err
		}
		d.origins[origin] = true
	}
	if err := o.Trust.Validate(); err != nil {
		return nil, cardErr(err)
	}
	if o.Timeout <= 0 {
		d.o.Timeout = 5 * time.Second
	}
	if o.MaxBytes <= 0 || o.MaxBytes > agentcard.MaxBytes {
		d.o.MaxBytes = agentcard.MaxBytes
	}
	if o.MaxAge <= 0 {
		d.o.MaxAge = time.Hour
	}
	if o.RetryAfter <= 0 {
		d.o.RetryAfter = 30 * time.Second
	}
	if o.Clock == nil {
		d.o.Clock = systemClock{}
	}
	base := o.Client
	if base == nil {
		base = &http.Client{Timeout: 10 * time.Second}
	}
	c := *base
	hostCheck := base.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		if origin(req.URL) != origin(via[0].URL) {
			return fmt.Errorf("redirect to another origin (%s) refused", origin(req.URL))
		}
		if hostCheck != nil {
			return hostCheck(req, via)
		}
		return nil
	}
	d.client = &c
	return d, nil
}

func origin(u *url.URL) string { return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) }

// parseOrigin accepts scheme://host[:port] (http or https, nothing after
// the host but an optional "/") and returns it in canonical form.
func parseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", invalid("%q is not an origin (scheme://host[:port])", s)
	}
	return origin(u), nil
}

// Origins returns the allow-listed origins, sorted.
func (d *RemoteDirectory) Origins() []string {
	var out []string
	for o := range d.origins {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// Lookup fetches (or returns from cache) the card of origin id. An id that
// is not an allow-listed origin is ErrNotFound without any request. A card
// that cannot be fetched, is too large, is not a valid card, or fails the
// signature policy is also ErrNotFound, wrapping the reason (for example
// context.DeadlineExceeded, ErrInvalidArgument or ErrCardSignature).
func (d *RemoteDirectory) Lookup(ctx context.Context, id string) (Listing, error) {
	o, err := parseOrigin(id)
	if err != nil || !d.origins[o] {
		return Listing{}, fmt.Errorf("switchboard: remote lookup: %w", notFoundNamed("agent", id))
	}
	c, err := d.fetch(ctx, o)
	if err != nil {
		return Listing{}, fmt.Errorf("switchboard: remote lookup: %w: agent at %s: %w", ErrNotFound, o, err)
	}
	return Listing{ID: o, Card: c}, nil
}

// Search looks up every allow-listed origin (from cache where fresh; at most
// eight fetches at a time) and returns the matching cards in origin order;
// origins that fail are left out.
func (d *RemoteDirectory) Search(ctx context.Context, q Query) ([]Listing, error) {
	ls, err := d.search(ctx, q)
	return ls, wrapErr("remote search", err)
}

func (d *RemoteDirectory) search(ctx context.Context, q Query) ([]Listing, error) {
	if err := q.normalize(); err != nil {
		return nil, err
	}
	origins := d.Origins()
	found := make([]*Listing, len(origins))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, o := range origins {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if l, err := d.Lookup(ctx, o); err == nil && q.match(l.Card) {
				found[i] = &l
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Listing
	for _, l := range found {
		if l != nil && len(out) < q.Limit {
			out = append(out, *l)
		}
	}
	return out, nil
}

func (d *RemoteDirectory) fetch(ctx context.Context, o string) (agentcard.Card, error) {
	now := d.o.Clock.Now()
	d.mu.Lock()
	hit, ok := d.cache[o]
	d.mu.Unlock()
	if ok && now.Before(hit.expires) {
		return hit.card, hit.err
	}
	if ok && hit.err != nil {
		ok = false // nothing to revalidate
	}
	paths := []string{"/.well-known/agent-card.json"}
	if d.o.LegacyPath {
		paths = append(paths, "/.well-known/agent.json")
	}
	var c agentcard.Card
	var err error
	for _, p := range paths {
		if c, err = d.get(ctx, o, p, hit, ok); !errors.Is(err, errNoCard) {
			break
		}
	}
	if err != nil && ctx.Err() == nil {
		d.remember(o, cached{err: err, expires: d.o.Clock.Now().Add(d.o.RetryAfter)}, true)
	}
	return c, err
}

var errNoCard = errors.New("no agent card at the well-known path")

func (d *RemoteDirectory) get(ctx context.Context, o, path string, hit cached, have bool) (agentcard.Card, error) {
	ctx, cancel := context.WithTimeout(ctx, d.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o+path, nil)
	if err != nil {
		return agentcard.Card{}, err
	}
	req.Header.Set("Accept", "application/json")
	if have && hit.etag != "" {
		req.Header.Set("If-None-Match", hit.etag)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return agentcard.Card{}, err
	}
	defer resp.Body.Close()
	maxAge, store := cacheFor(resp.Header)
	if maxAge > d.o.MaxAge {
		maxAge = d.o.MaxAge
	}
	switch {
	case resp.StatusCode == http.StatusNotModified && have:
		hit.expires = d.o.Clock.Now().Add(maxAge)
		d.remember(o, hit, store)
		return hit.card, nil
	case resp.StatusCode == http.StatusNotFound:
		return agentcard.Card{}, errNoCard
	case resp.StatusCode != http.StatusOK:
		return agentcard.Card{}, fmt.Errorf("status %s", resp.Status)
	}
	if resp.ContentLength > int64(d.o.MaxBytes) {
		return agentcard.Card{}, invalid("card is %d bytes, limit %d", resp.ContentLength, d.o.MaxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(d.o.MaxBytes)+1))
	if err != nil {
		return agentcard.Card{}, err
	}
	if len(body) > d.o.MaxBytes {
		return agentcard.Card{}, invalid("card is larger than %d bytes", d.o.MaxBytes)
	}
	c, err := agentcard.Parse(body)
	if err != nil {
		return agentcard.Card{}, cardErr(err)
	}
	if err := d.o.Trust.Check(c); err != nil {
		return agentcard.Card{}, cardErr(err)
	}
	d.remember(o, cached{card: c, etag: resp.Header.Get("ETag"), expires: d.o.Clock.Now().Add(maxAge)}, store)
	return c, nil
}

func (d *RemoteDirectory) remember(o string, c cached, store bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if store {
		d.cache[o] = c
	} else {
		delete(d.cache, o)
	}
}

// cacheFor reads Cache-Control: how long the response is fresh, and whether
// it may be kept at all.
func cacheFor(h http.Header) (time.Duration, bool) {
	var maxAge time.Duration
	for _, part := range strings.Split(h.Get("Cache-Control"), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(strings.ToLower(part)), "=")
		switch k {
		case "no-store":
			return 0, false
		case "no-cache":
			return 0, true
		case "max-age":
			if n, err := strconv.Atoi(strings.Trim(v, `"`)); err == nil && n > 0 {
				maxAge = time.Duration(n) * time.Second
			}
		}
	}
	return maxAge, true
}
