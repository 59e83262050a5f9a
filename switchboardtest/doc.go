// Package switchboardtest is a test kit for code that embeds switchboard: a
// real OIDC issuer running in the test process (a discovery document and a
// JWKS served over httptest on a loopback port) that mints ID tokens —
// request-bound ones for friend requests, nonce-bound ones for logins —
// signed with its own keys. Tokens are verified exactly as a production
// identity provider's, with no verifier stub, so a test on the in-memory
// store goes through the whole flow in a few lines:
//
//	iss, _ := switchboardtest.NewIssuer("test-client")
//	defer iss.Close()
//	sb, _ := switchboard.New(memory.New(), &switchboard.Config{Issuers: []switchboard.Issuer{iss.Config()}})
//	secret, pickup := switchboard.NewPickup()
//	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: scope, Why: "invoices", Pickup: pickup}
//	req.IDToken = iss.RequestToken("alice", req, time.Now())
//	edge, _, _ := sb.Request(ctx, req)
//	sb.Approve(ctx, iss.Human("bob"), edge.ID, nil)
//	_, credential, _ := sb.Collect(ctx, edge.ID, secret)
//
// [NewKit] goes further: a Switchboard on the memory store that trusts a
// fresh issuer, with helpers that fail the test on error —
//
//	k := switchboardtest.NewKit(t, nil)
//	k.Publish("alice", "alice-bot")
//	k.Publish("bob", "bob-desk")
//	_, cred := k.Friend("alice-bot", "bob-desk", scope) // request, approve, collect
//	worker := k.Worker("bob-desk", "inbox")             // bob's own agent drains inbox
//
// The issuer also signs humans in through a browser: its discovery document
// names an authorization endpoint (a form asking whom to sign in as —
// anyone, as anyone: never for production) and a token endpoint, for the
// OAuth 2.0 authorization code flow with PKCE, whose ID token carries the
// authorization request's nonce. The issuer's keys can be rotated, and it
// counts JWKS fetches so tests can see refetch limits. [SignWith] signs arbitrary payloads, for tests of
// forged tokens.
package switchboardtest
