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
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
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
	logKeyFile := flag.String("log-key", "", "a file holding the audit log's signing key (created if missing), for signed checkpoints and proofs on the history page; the last checkpoint is kept beside it (FILE.checkpoint)")
	primary := flag.String("primary", "", "the persona served at /.well-known/agent-card.json")
	witnessKeyFile := flag.String("witness-key", "", "a file holding this host's witness key (an Ed25519 seed, created if missing): with -witness-for, this host cosigns those logs' checkpoints at POST /witness/add-checkpoint")
	witnessName := flag.String("witness-name", "", "this host's name as a witness (default: <host of -base-url>/witness)")
	var witnessFor, witnesses listFlag
	flag.Var(&witnessFor, "witness-for", "the public key (LogVerifierKey) of a log this host witnesses; repeat for more")
	flag.Var(&witnesses, "witness", "URL,KEY: a witness this host asks to cosign its checkpoints (its add-checkpoint URL and its public key); repeat for more")
	dev := flag.Bool("dev", false, "run with an embedded OIDC issuer (at <base-url>/dev/issuer) and the /dev/login and /dev/id-token routes, keeping all state in -dev-dir (for trying the host; never in production)")
	devDir := flag.String("dev-dir", ".switchboard-dev", "with -dev: the one directory of the dev host's state — its store, the audit log's key and kept checkpoint, the dev issuer's signing key — so a restart continues where it stopped")
	devReset := flag.Bool("dev-reset", false, "with -dev: delete -dev-dir first and start over")
	reapInterval := flag.Duration("reap-interval", 5*time.Second, "how often the host's housekeeping runs (Config.ReapInterval): expired leases, requests and grants, retention, a checkpoint of the audit log")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *baseURL == "" {
		*baseURL = "http://" + *addr
	}
	*baseURL = strings.TrimSuffix(*baseURL, "/")
	var devIssuer *switchboardtest.Issuer
	var devSignIn *SignIn
	if *dev {
		if *issuer != "" {
			log.Error("-dev runs its own issuer: leave out -issuer")
			os.Exit(2)
		}
		var err error
		if devIssuer, err = devSetup(*devDir, *devReset, *baseURL); err != nil {
			log.Error("dev", "err", err)
			os.Exit(1)
		}
		// Everything the host writes goes to the dev directory, unless a
		// flag names a place of its own.
		for name, p := range map[string]*string{"db": db, "log-key": logKeyFile} {
			if !set[name] {
				*p = filepath.Join(*devDir, map[string]string{"db": "switchboard.db", "log-key": "log.key"}[name])
			}
		}
		if *webhookOrigins != "" && !set["webhook-key"] {
			*webhookKeyFile = filepath.Join(*devDir, "webhook.key")
		}
		*issuer, *clientID = devIssuer.URL(), "switchboard-dev"
		// The issuer is this host: its endpoints are known, not discovered
		// (the host is not listening yet when the pages are built).
		devSignIn = &SignIn{Issuer: *issuer, ClientID: *clientID, RedirectURL: *baseURL + "/signin/callback",
			AuthURL: *issuer + "/auth", TokenURL: *issuer + "/token"}
		log.Warn("DEV MODE: anyone can sign in as anyone (POST /dev/login) and mint ID tokens (POST /dev/id-token)", "issuer", *issuer, "state", *devDir)
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
	var wcs []switchboard.WitnessConfig
	for _, w := range witnesses {
		i := strings.LastIndexByte(w, ',')
		if i < 0 {
			log.Error("-witness wants URL,KEY", "value", w)
			os.Exit(2)
		}
		wcs = append(wcs, switchboard.WitnessConfig{Witness: &witness.Client{URL: w[:i]}, Key: w[i+1:]})
	}
	var checkpoints switchboard.CheckpointStore
	if *logKeyFile != "" {
		// The last signed checkpoint, kept beside the key and outside the
		// store: deleting or rolling back the stored one is caught.
		checkpoints = switchboard.CheckpointFile(*logKeyFile + ".checkpoint")
	}
	sb, err := switchboard.New(st, &switchboard.Config{
		Issuers:      []switchboard.Issuer{{URL: *issuer, ClientID: *clientID}},
		Logger:       log,
		LogKey:       logKey,
		Checkpoints:  checkpoints,
		Witnesses:    wcs,
		Webhooks:     webhooks,
		ReapInterval: *reapInterval,
	})
	if err != nil {
		log.Error("switchboard", "err", err)
		os.Exit(1)
	}
	defer sb.Close()
	if logKey != "" {
		if err := sb.CheckLog(context.Background()); err != nil {
			log.Error("the audit log does not hold what was signed: nothing more will be signed until it does", "err", err)
		}
	}
	var wit *witness.Server
	if *witnessKeyFile != "" {
		if wit, err = newWitness(*witnessKeyFile, *witnessName, *baseURL, witnessFor, st); err != nil {
			log.Error("witness", "err", err)
			os.Exit(1)
		}
		log.Info("witnessing", "logs", len(witnessFor), "key", wit.VerifierKey(), "url", strings.TrimSuffix(*baseURL, "/")+"/witness/add-checkpoint")
	}
	signIn := &SignIn{Issuer: *issuer, ClientID: *clientID, ClientSecret: *clientSecret, RedirectURL: *baseURL + "/signin/callback"}
	if devSignIn != nil {
		signIn = devSignIn
	}
	handler, err := newHost(hostConfig{SB: sb, Store: st, Primary: *primary, Logger: log, Dev: devIssuer, BaseURL: *baseURL, Witness: wit, SignIn: signIn})
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

// devSetup makes the dev directory (emptied first with reset) and the dev
// issuer, served by the host at <base>/dev/issuer and signing with the key
// kept in the directory: the same humans after a restart.
func devSetup(dir string, reset bool, base string) (*switchboardtest.Issuer, error) {
	if reset {
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "issuer.key")
	var key *rsa.PrivateKey
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		blk, _ := pem.Decode(b)
		if blk == nil || blk.Type != "RSA PRIVATE KEY" {
			return nil, fmt.Errorf("%s is not an RSA private key (delete it, or start over with -dev-reset)", path)
		}
		if key, err = x509.ParsePKCS1PrivateKey(blk.Bytes); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	case !os.IsNotExist(err):
		return nil, err
	}
	is, err := switchboardtest.NewIssuerAt(base+"/dev/issuer", "switchboard-dev", key)
	if err != nil {
		return nil, err
	}
	if key == nil {
		pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(is.SigningKey())})
		if err := os.WriteFile(path, pemKey, 0o600); err != nil {
			return nil, err
		}
	}
	return is, nil
}

// loadLogKey reads the audit log's signing key from path, creating it
// (0600) if missing; with no path a host signs no checkpoints.
func loadLogKey(path string, dev bool) (string, error) {
	if path == "" {
		return "", nil
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

// listFlag is a flag that may be repeated.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// newWitness makes this host a witness of the logs whose public keys are
// given, with the key in keyFile (an Ed25519 seed, created 0600 if
// missing) and its state in st.
func newWitness(keyFile, name, baseURL string, logs []string, st store.Store) (*witness.Server, error) {
	seed, err := os.ReadFile(keyFile)
	if os.IsNotExist(err) {
		seed = make([]byte, ed25519.SeedSize)
		_, _ = rand.Read(seed)
		err = os.WriteFile(keyFile, seed, 0o600)
	}
	if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%s holds %d bytes, not an Ed25519 seed", keyFile, len(seed))
	}
	if name == "" {
		u, err := url.Parse(baseURL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("-witness-name: cannot derive one from %q", baseURL)
		}
		name = u.Host + "/witness"
	}
	var ls []witness.Log
	for _, k := range logs {
		v, err := note.NewVerifier(k)
		if err != nil {
			return nil, fmt.Errorf("-witness-for %q: %w", k, err)
		}
		ls = append(ls, witness.Log{Origin: v.Name(), Keys: []string{k}})
	}
	return witness.NewServer(witness.Config{Name: name, Key: ed25519.NewKeyFromSeed(seed), Logs: ls, Store: st})
}
