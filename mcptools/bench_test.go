package mcptools_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboardhq/switchboard/mcptools"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// presigned is a DPoP client whose proofs of POSTs to one URL were signed
// in advance, so the benchmark times the host's side only (signing is the
// agent's cost); other requests are signed as they go.
type presigned struct {
	dpopClient
	mu   sync.Mutex
	url  string
	pool []string
}

func (p *presigned) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	if r.Method == "POST" && r.URL.String() == p.url && len(p.pool) > 0 {
		proof := p.pool[len(p.pool)-1]
		p.pool = p.pool[:len(p.pool)-1]
		p.mu.Unlock()
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "DPoP "+p.cred)
		r.Header.Set("DPoP", proof)
		return p.rt.RoundTrip(r)
	}
	p.mu.Unlock()
	return p.dpopClient.RoundTrip(r)
}

// BenchmarkToolCall measures one create_for tool call over streamable HTTP
// with the official MCP client, on the memory store: with a bearer
// credential, and with a grant bound to an ES256 or Ed25519 key, where
// the host checks and spends a DPoP proof of the request.
func BenchmarkToolCall(b *testing.B) {
	for _, alg := range []string{"bearer", "ES256", "EdDSA"} {
		b.Run(alg, func(b *testing.B) {
			k := switchboardtest.NewKit(b, nil)
			k.Publish("alice", "alice-bot")
			k.Publish("bob", "bob-desk")
			srv := httptest.NewUnstartedServer(nil)
			srv.Start()
			defer srv.Close()
			srv.Config.Handler = mcptools.Handler(k.SB, &mcptools.Options{URL: srv.URL})
			var rt http.RoundTripper
			if alg == "bearer" {
				_, cred := k.Friend("alice-bot", "bob-desk", inbox)
				rt = bearer{string(cred), http.DefaultTransport}
			} else {
				key, err := switchboardtest.NewProofKey(alg)
				if err != nil {
					b.Fatal(err)
				}
				_, cred := k.BoundFriend("alice-bot", "bob-desk", inbox, key)
				p := &presigned{dpopClient: dpopClient{cred: string(cred), key: key, rt: http.DefaultTransport}, url: srv.URL}
				for range b.N + 8 {
					p.pool = append(p.pool, key.Sign(switchboardtest.ProofClaims{JTI: rand.Text(), Method: "POST", URL: srv.URL, IssuedAt: time.Now(), Token: string(cred)}))
				}
				rt = p
			}
			s, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			args := map[string]any{"queue": "inbox", "kind": "k"}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_for", Arguments: args})
				if err != nil || res.IsError {
					b.Fatal(err, res)
				}
			}
			b.StopTimer()
			if p, ok := rt.(*presigned); ok && len(p.pool) > 8 {
				b.Fatalf("%d presigned proofs left: the calls were signed as they went", len(p.pool))
			}
		})
	}
}
