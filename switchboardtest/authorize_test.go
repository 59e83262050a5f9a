package switchboardtest_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// The authorization code flow with PKCE: the code is exchanged once, only
// with its verifier and redirect URI, for an ID token switchboard verifies
// with the authorization request's nonce.
func TestAuthorizationCodeFlow(t *testing.T) {
	is, err := switchboardtest.NewIssuer("host")
	require.NoError(t, err)
	defer is.Close()
	sb, err := switchboard.New(memory.New(), &switchboard.Config{Issuers: []switchboard.Issuer{is.Config()}})
	require.NoError(t, err)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	verifier := "a-verifier-of-enough-length-for-pkce-0123456789"
	sum := sha256.Sum256([]byte(verifier))
	form := url.Values{"response_type": {"code"}, "client_id": {"host"}, "redirect_uri": {"http://127.0.0.1:1/cb"},
		"state": {"st"}, "nonce": {"n-1"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}, "subject": {"bob"}, "name": {"Bob"}}

	page, err := http.Get(is.URL() + "/auth?" + form.Encode())
	require.NoError(t, err)
	page.Body.Close()
	require.Equal(t, http.StatusOK, page.StatusCode)

	resp, err := noRedirect.PostForm(is.URL()+"/auth", form)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "st", loc.Query().Get("state"))
	code := loc.Query().Get("code")

	exchange := func(code, verifier, redirect string) (int, map[string]any) {
		resp, err := http.PostForm(is.URL()+"/token", url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"client_id": {"host"}, "redirect_uri": {redirect}, "code_verifier": {verifier}})
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	st, _ := exchange(code, "wrong", "http://127.0.0.1:1/cb")
	require.Equal(t, http.StatusBadRequest, st, "a wrong verifier")
	// The failed try spent the code: a stolen code is worth one guess.
	st, _ = exchange(code, verifier, "http://127.0.0.1:1/cb")
	require.Equal(t, http.StatusBadRequest, st, "a spent code")

	resp, err = noRedirect.PostForm(is.URL()+"/auth", form)
	require.NoError(t, err)
	resp.Body.Close()
	loc, _ = url.Parse(resp.Header.Get("Location"))
	code = loc.Query().Get("code")
	st, _ = exchange(code, verifier, "http://127.0.0.1:1/other")
	require.Equal(t, http.StatusBadRequest, st, "another redirect URI")

	resp, err = noRedirect.PostForm(is.URL()+"/auth", form)
	require.NoError(t, err)
	resp.Body.Close()
	loc, _ = url.Parse(resp.Header.Get("Location"))
	st, out := exchange(loc.Query().Get("code"), verifier, "http://127.0.0.1:1/cb")
	require.Equal(t, http.StatusOK, st)
	idToken, _ := out["id_token"].(string)
	require.True(t, strings.Count(idToken, ".") == 2)
	prov, err := sb.VerifyHuman(context.Background(), idToken, "n-1")
	require.NoError(t, err)
	require.Equal(t, is.Human("bob"), prov.Human())
	require.Equal(t, "Bob", prov.Name)
	_, err = sb.VerifyHuman(context.Background(), idToken, "n-2")
	require.Error(t, err, "another nonce")
}
