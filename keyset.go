// The JWKS key set of an issuer: caching, key rotation and the refetch policy.

package switchboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/switchboardhq/switchboard/internal/strictjson"
)

// keySet is the key set of one issuer: a static set, or an issuer's
// JWKS fetched on first use and refetched when a token names a key id the
// cached set lacks or the set is older than keyMaxAge — never more often
// than once per interval, so a flood of tokens with made-up key ids costs
// the issuer at most one fetch per interval.
type keySet struct {
	url    string // "" for a static set
	client *http.Client
	clock  Clock
	every  time.Duration
	algs   []jose.SignatureAlgorithm

	mu      sync.RWMutex
	keys    []jose.JSONWebKey
	fetchMu sync.Mutex // one fetch at a time; guards the fields below
	last    time.Time  // last fetch that reached the issuer
	good    time.Time  // last successful fetch
}

// keyMaxAge is how long a fetched JWKS is used before it is refetched, so
// keys the issuer withdrew stop verifying.
const keyMaxAge = time.Hour

// maxJWKS bounds a JWKS response.
const maxJWKS = 1 << 20

var errNoKey = errors.New("no key of the issuer verifies the signature")

// verifyJWS checks the signature of a token parsed once by parseIDToken,
// and that what it signs is the payload that parse decoded.
func (k *keySet) verifyJWS(ctx context.Context, jws *jose.JSONWebSignature, payload []byte) error {
	p, err := k.verify(ctx, jws)
	if err != nil {
		return err
	}
	if !bytes.Equal(p, payload) {
		return errors.New("signed payload differs from the token's payload")
	}
	return nil
}

func (k *keySet) verify(ctx context.Context, jws *jose.JSONWebSignature) ([]byte, error) {
	kid := jws.Signatures[0].Header.KeyID
	if k.url != "" && k.stale() {
		if err := k.refresh(ctx); err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	cands := k.matching(kid)
	if p, ok := verifyWith(jws, cands); ok {
		return p, nil
	}
	// A known key id whose key does not verify is a bad signature, not a
	// rotation: no refetch.
	if k.url == "" || (kid != "" && len(cands) > 0) {
		return nil, errNoKey
	}
	if err := k.refresh(ctx); err != nil {
		return nil, err
	}
	if p, ok := verifyWith(jws, k.matching(kid)); ok {
		return p, nil
	}
	return nil, errNoKey
}

func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey) ([]byte, bool) {
	for _, key := range keys {
		if p, err := jws.Verify(key); err == nil {
			return p, true
		}
	}
	return nil, false
}

// matching returns the keys a token naming kid may be signed with: the key
// with that id, or every key when the token names none.
func (k *keySet) matching(kid string) []jose.JSONWebKey {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if kid == "" {
		return k.keys
	}
	var out []jose.JSONWebKey
	for _, key := range k.keys {
		if key.KeyID == kid {
			out = append(out, key)
		}
	}
	return out
}

func (k *keySet) stale() bool {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	return k.good.IsZero() || k.clock.Now().Sub(k.good) >= keyMaxAge
}

// refresh refetches the JWKS unless a fetch reached the issuer less than
// one interval ago. A failed fetch keeps the keys already held.
func (k *keySet) refresh(ctx context.Context) error {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	now := k.clock.Now()
	if !k.last.IsZero() && now.Sub(k.last) < k.every {
		return nil // rate-limited: the caller re-checks the keys it has
	}
	keys, err := k.fetch(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		k.last = now
		return fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	k.last, k.good = now, now
	k.mu.Lock()
	k.keys = keys
	k.mu.Unlock()
	return nil
}

func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("JWKS status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxJWKS {
		return nil, errors.New("JWKS larger than 1 MiB")
	}
	obj, err := strictObject(body, "keys")
	if err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	for _, k := range asList(obj["keys"]) {
		m, _ := k.(map[string]any)
		if kk, f := strictjson.CaseTwin(m, jwkNames...); kk != "" {
			return nil, fmt.Errorf("JWKS: key parameter %q differs from %q only by case", kk, f)
		}
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, key := range set.Keys {
		if key.IsPublic() && key.Valid() && (key.Use == "" || key.Use == "sig") {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// jwkNames are the JWK parameters go-jose reads.
var jwkNames = []string{"kty", "kid", "use", "alg", "crv", "x", "y", "n", "e", "d", "x5c", "x5u", "x5t", "x5t#S256", "key_ops", "k"}

func asList(v any) []any { l, _ := v.([]any); return l }
