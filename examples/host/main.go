// Command host serves switchboard over HTTP: Agent Cards at the A2A
// well-known path, friend requests, sign-in and approvals for humans,
// credential pickup, and the queue verbs as MCP tools over streamable HTTP.
// It is an example to read and adapt; see the README's "Embedding in a
// host".
//
//	go run ./examples/host -issuer https://accounts.example.com -client-id my-client
//	go run ./examples/host -dev    # a local issuer, sign-in and tokens without an identity provider
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	db := flag.String("db", "switchboard.db", "bbolt file")
	issuer := flag.String("issuer", "", "the OIDC issuer that signs your humans in (and whose friend requests you accept)")
	clientID := flag.String("client-id", "", "this deployment's client id at the issuer")
	clientSecret := flag.String("client-secret", "", "this deployment's client secret at the issuer, for the browser sign-in (empty: a public client, PKCE only)")
	baseURL := flag.String("base-url", "", "the URL humans and agents reach this host at (default http://<addr>); the issuer redirects to <base-url>/signin/callback, DPoP proofs name <base-url>/mcp")
	webhookKeyFile := flag.String("webhook-key", "", "a file holding the key webhook signing secrets derive from (created if missing); with -webhook-origins, turns webhooks on")
	webhookOrigins := flag.String("webhook-origins", "", "comma-separated origins webhooks may be delivered to (https://hooks.example.com); with -dev, http and loopback are allowed too")
	logKeyFile := flag.String("log-key", "", "a file holding the audit log's signing key (created if missing), for signed checkpoints and proofs on the history page; -dev makes a throwaway one")
	primary := flag.String("primary", "", "the persona served at /.well-known/agent-card.json")
	dev := flag.Bool("dev", false, "run with an embedded local OIDC issuer and the /dev/login and /dev/id-token routes (for trying the host; never in production)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var devIssuer *switchboardtest.Issuer
	if *dev {
		if *issuer != "" {
			log.Error("-dev runs its own issuer: leave out -issuer")
			os.Exit(2)
		}
		var err error
		if devIssuer, err = switchboardtest.NewIssuer("switchboard-dev"); err != nil {
			log.Error("dev issuer", "err", err)
			os.Exit(1)
		}
		defer devIssuer.Close()
		*issuer, *clientID = devIssuer.URL(), "switchboard-dev"
		log.Warn("DEV MODE: anyone can sign in as anyone (POST /dev/login) and mint ID tokens (POST /dev/id-token)", "issuer", *issuer)
	}
	if *issuer == "" || *clientID == "" {
		log.Error("set -issuer and -client-id (or -dev)")
		os.Exit(2)
	}
	st, err := bolt.Open(*db, nil)
	if err != nil {
		log.Error("open store", "err", err)
		os.Exit(1)
	}
	defer st.Close()
	logKey, err := loadLogKey(*logKeyFile, *dev)
	if err != nil {
		log.Error("log key", "err", err)
		os.Exit(1)
	}
	webhooks, err := webhookConfig(*webhookKeyFile, *webhookOrigins, *dev)
	if err != nil {
		log.Error("webhooks", "err", err)
		os.Exit(1)
	}
	sb, err := switchboard.New(st, &switchboard.Config{
		Issuers:  []switchboard.Issuer{{URL: *issuer, ClientID: *clientID}},
		Logger:   log,
		LogKey:   logKey,
		Webhooks: webhooks,
	})
	if err != nil {
		log.Error("switchboard", "err", err)
		os.Exit(1)
	}
	defer sb.Close()
	if *baseURL == "" {
		*baseURL = "http://" + *addr
	}
	handler, err := newHost(hostConfig{SB: sb, Store: st, Primary: *primary, Logger: log, Dev: devIssuer, BaseURL: *baseURL,
		SignIn: &SignIn{Issuer: *issuer, ClientID: *clientID, ClientSecret: *clientSecret, RedirectURL: strings.TrimSuffix(*baseURL, "/") + "/signin/callback"}})
	if err != nil {
		log.Error("host", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { _ = sb.Run(ctx) }() // the reaper
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second,
		Handler: handler}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("listening", "addr", *addr)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

// loadLogKey reads the audit log's signing key from path, creating it
// (0600) if missing; with no path, -dev gets a throwaway key and a
// production host signs no checkpoints.
func loadLogKey(path string, dev bool) (string, error) {
	if path == "" {
		if !dev {
			return "", nil
		}
		skey, _, err := switchboard.NewLogKey("switchboard-dev/log")
		return skey, err
	}
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !os.IsNotExist(err) {
		return "", err
	}
	skey, _, err := switchboard.NewLogKey("switchboard/log")
	if err != nil {
		return "", err
	}
	return skey, os.WriteFile(path, []byte(skey+"\n"), 0o600)
}

// webhookConfig turns webhooks on when origins are given: the key is read
// from keyFile (32 random bytes, created 0600 if missing; -dev may leave it
// out for a throwaway key). Run delivers; agents register over MCP.
func webhookConfig(keyFile, origins string, dev bool) (*switchboard.WebhookConfig, error) {
	if origins == "" {
		return nil, nil
	}
	var key []byte
	switch b, err := os.ReadFile(keyFile); {
	case keyFile == "" && dev:
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	case keyFile == "":
		return nil, errors.New("-webhook-origins needs -webhook-key")
	case err == nil:
		key = b
	case os.IsNotExist(err):
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		if err := os.WriteFile(keyFile, key, 0o600); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	return &switchboard.WebhookConfig{Key: key, Origins: strings.Split(origins, ","), AllowHTTP: dev, AllowPrivate: dev}, nil
}
