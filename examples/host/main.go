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
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
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
	sb, err := switchboard.New(st, &switchboard.Config{
		Issuers: []switchboard.Issuer{{URL: *issuer, ClientID: *clientID}},
		Logger:  log,
	})
	if err != nil {
		log.Error("switchboard", "err", err)
		os.Exit(1)
	}
	defer sb.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { _ = sb.Run(ctx) }() // the reaper
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second,
		Handler: newHost(hostConfig{SB: sb, Store: st, Primary: *primary, Logger: log, Dev: devIssuer})}
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
