// The issuer's sign-in: an OAuth 2.0 authorization code flow (RFC 6749
// §4.1, with PKCE, RFC 7636) that hosts and browser tests can drive.

package switchboardtest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"time"
)

// grant is an authorization code waiting to be exchanged.
type grant struct {
	clientID, redirectURI, challenge string
	subject, name, email, nonce      string
	expires                          time.Time
}

var signInPage = template.Must(template.New("auth").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Test identity provider</title></head>
<body><main>
<h1>Test identity provider</h1>
<p>This issuer signs in anyone as anyone: it is for tests and for trying a host, never for production.</p>
<form method="post" action="/auth">
{{range $k, $v := .Params}}<input type="hidden" name="{{$k}}" value="{{$v}}">
{{end}}<p><label for="subject">Subject</label> <input id="subject" name="subject" required value="{{.Hint}}"></p>
<p><label for="name">Name</label> <input id="name" name="name"></p>
<p><label for="email">Email</label> <input id="email" name="email" type="email"></p>
<p><button type="submit" id="signin">Sign in</button></p>
</form></main></body></html>`))

// authorize serves the authorization endpoint: GET shows a form asking
// whom to sign in as (login_hint fills it), POST issues a code and
// redirects to the client's redirect_uri with it and the state.
func (is *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	q := r.Form
	if q.Get("response_type") != "code" || q.Get("client_id") != is.ClientID {
		http.Error(w, "unsupported response_type or unknown client_id", http.StatusBadRequest)
		return
	}
	redirect, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || (redirect.Scheme != "http" && redirect.Scheme != "https") || redirect.Host == "" {
		http.Error(w, "redirect_uri must be an absolute http(s) URL", http.StatusBadRequest)
		return
	}
	if q.Get("code_challenge") != "" && q.Get("code_challenge_method") != "S256" {
		http.Error(w, "only the S256 code challenge is supported", http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodGet {
		params := map[string]string{}
		for _, k := range []string{"response_type", "client_id", "redirect_uri", "state", "nonce", "code_challenge", "code_challenge_method"} {
			params[k] = q.Get(k)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = signInPage.Execute(w, map[string]any{"Params": params, "Hint": q.Get("login_hint")})
		return
	}
	if q.Get("subject") == "" {
		http.Error(w, "subject is required", http.StatusBadRequest)
		return
	}
	code := randomHex()
	is.mu.Lock()
	if is.codes == nil {
		is.codes = map[string]grant{}
	}
	is.codes[code] = grant{clientID: is.ClientID, redirectURI: redirect.String(), challenge: q.Get("code_challenge"),
		subject: q.Get("subject"), name: q.Get("name"), email: q.Get("email"), nonce: q.Get("nonce"),
		expires: time.Now().Add(time.Minute)}
	is.mu.Unlock()
	v := redirect.Query()
	v.Set("code", code)
	if s := q.Get("state"); s != "" {
		v.Set("state", s)
	}
	redirect.RawQuery = v.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

// token serves the token endpoint: a code, once, for the redirect_uri it
// was issued to (and the PKCE verifier, if a challenge was sent), is
// exchanged for an ID token carrying the authorization request's nonce.
func (is *Issuer) token(w http.ResponseWriter, r *http.Request) {
	fail := func(code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "authorization_code" {
		fail("unsupported_grant_type")
		return
	}
	f := r.PostForm
	is.mu.Lock()
	g, ok := is.codes[f.Get("code")]
	delete(is.codes, f.Get("code"))
	is.mu.Unlock()
	client := f.Get("client_id")
	if u, _, basic := r.BasicAuth(); basic {
		client = u
	}
	if !ok || time.Now().After(g.expires) || client != g.clientID || f.Get("redirect_uri") != g.redirectURI {
		fail("invalid_grant")
		return
	}
	if g.challenge != "" {
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		if subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:])), []byte(g.challenge)) != 1 {
			fail("invalid_grant")
			return
		}
	}
	c := is.Claims(g.subject, g.nonce, time.Now())
	c.Name, c.Email, c.AMR = g.name, g.email, []string{"pwd"}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": randomHex(), "token_type": "Bearer", "expires_in": 300, "id_token": is.Sign(c)})
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
