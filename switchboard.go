package switchboard

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/switchboardhq/switchboard/store"
)

// Config configures a Switchboard. A nil *Config, and every zero field,
// means the documented default.
type Config struct {
	// Clock is the only source of time the library uses: timestamps,
	// expiries, token freshness, lease lengths, the reaper's schedule and a
	// blocking Claim's polling all follow it. Default the system clock.
	// Tests inject a fake clock here and advance it instead of sleeping.
	Clock Clock

	// Issuers is the allow-list of OIDC identity providers whose ID tokens
	// may prove the human behind a friend request. With no issuers every
	// friend request is refused with ErrProvenance.
	Issuers []Issuer
	// HTTPClient is used for OIDC discovery and JWKS fetches. Default
	// http.DefaultClient with a 10 second timeout.
	HTTPClient *http.Client
	// MaxTokenAge bounds how long ago an ID token may have been issued
	// (its iat). Default 10 minutes.
	MaxTokenAge time.Duration
	// ClockLeeway is the tolerance for an iat in the future. Default 1 minute.
	ClockLeeway time.Duration
	// Binding says how a friend request's ID token is tied to the request.
	// Default BindNonce; BindFreshOnly is weaker (see its doc).
	Binding Binding
	// KeyRefetchInterval is the least time between two fetches of an
	// issuer's JWKS (or retries of its discovery), however many tokens
	// name unknown keys. Default 1 minute.
	KeyRefetchInterval time.Duration

	// PendingTTL is how long a friend request stays pending before it
	// expires. Default 7 days.
	PendingTTL time.Duration
	// DefaultLease is the lease length of a Claim that names none and whose
	// grant sets no default. Default 5 minutes.
	DefaultLease time.Duration
	// MaxLease bounds a lease. Default 24 hours.
	MaxLease time.Duration
	// MaxAttempts is the default number of attempts before a todo is
	// dead-lettered. Default 5.
	MaxAttempts int
	// PollInterval is how often a blocking Claim re-checks the store for work
	// written by another process; work created through this Switchboard
	// wakes it at once. Default 1 second.
	PollInterval time.Duration
	// ReapInterval is how often Run calls Reap. Default 5 seconds.
	ReapInterval time.Duration
	// DedupRetention is how long a dedup key keeps returning its todo after
	// the todo ended. Default 24 hours.
	DedupRetention time.Duration

	// Directories are the only places a friend request's target is looked
	// up, in order. Default: NewLocalDirectory over the Switchboard's store.
	// A target must resolve in one of them and be a discoverable persona
	// published in the store (whose human can approve).
	Directories []Directory

	// Quotas bound friend requests per human; see Quotas for the defaults.
	Quotas Quotas

	// Limits bounds input sizes. Zero fields take the defaults of
	// DefaultLimits.
	Limits Limits
}

// Limits bounds the size of inputs. Every limit is in bytes unless it says
// otherwise.
type Limits struct {
	MaxName         int // persona ids, queue names, card names, kinds: 128
	MaxWhy          int // a friend request's reason: 1024
	MaxScopeEntries int // queues in one scope (count): 32
	MaxTitle        int // todo title: 256
	MaxPayload      int // todo payload: 64 KiB
	MaxResult       int // todo result: 64 KiB
	MaxDedupKey     int // todo dedup key: 256
	MaxCard         int // encoded agent card: 256 KiB
	MaxToken        int // encoded ID token: 16 KiB
}

// DefaultLimits are the limits used for zero fields of Config.Limits.
var DefaultLimits = Limits{
	MaxName:         128,
	MaxWhy:          1024,
	MaxScopeEntries: 32,
	MaxTitle:        256,
	MaxPayload:      64 << 10,
	MaxResult:       64 << 10,
	MaxDedupKey:     256,
	MaxCard:         256 << 10,
	MaxToken:        16 << 10,
}

// Switchboard is the library's entry point: every operation is a method on
// it. It holds no state of its own beyond configuration and caches; all
// records live in the Store, so several Switchboard values (in one process
// or several) may share one store. It is safe for concurrent use.
type Switchboard struct {
	st     store.Store
	cfg    Config
	now    func() time.Time
	oidc   *verifier
	limits Limits
	quotas Quotas
	dirs   []Directory
	// localDir: one of dirs is the local directory of st, so a persona in
	// st that is discoverable resolves without asking the others.
	localDir bool
	wake     waker
}

// New returns a Switchboard over st. The caller keeps ownership of st and
// closes it after it is done with the Switchboard.
func New(st store.Store, cfg *Config) (*Switchboard, error) {
	if st == nil {
		return nil, invalid("nil store")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.MaxTokenAge, 10*time.Minute)
	def(&c.ClockLeeway, time.Minute)
	def(&c.KeyRefetchInterval, time.Minute)
	def(&c.PendingTTL, 7*24*time.Hour)
	def(&c.DefaultLease, 5*time.Minute)
	def(&c.MaxLease, 24*time.Hour)
	def(&c.DedupRetention, 24*time.Hour)
	def(&c.PollInterval, time.Second)
	def(&c.ReapInterval, 5*time.Second)
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	for _, d := range []time.Duration{c.PollInterval, c.ReapInterval, c.KeyRefetchInterval, c.MaxTokenAge, c.ClockLeeway, c.PendingTTL, c.DefaultLease, c.MaxLease, c.DedupRetention} {
		if d < 0 {
			return nil, invalid("negative duration in Config")
		}
	}
	if c.MaxAttempts < 0 {
		return nil, invalid("negative Config.MaxAttempts")
	}
	if c.DefaultLease > c.MaxLease {
		return nil, invalid("Config.DefaultLease %s exceeds Config.MaxLease %s", c.DefaultLease, c.MaxLease)
	}
	l := c.Limits
	defInt := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	defInt(&l.MaxName, DefaultLimits.MaxName)
	defInt(&l.MaxWhy, DefaultLimits.MaxWhy)
	defInt(&l.MaxScopeEntries, DefaultLimits.MaxScopeEntries)
	defInt(&l.MaxTitle, DefaultLimits.MaxTitle)
	defInt(&l.MaxPayload, DefaultLimits.MaxPayload)
	defInt(&l.MaxResult, DefaultLimits.MaxResult)
	defInt(&l.MaxDedupKey, DefaultLimits.MaxDedupKey)
	defInt(&l.MaxCard, DefaultLimits.MaxCard)
	defInt(&l.MaxToken, DefaultLimits.MaxToken)
	c.Limits = l
	v, err := newVerifier(c)
	if err != nil {
		return nil, err
	}
	dirs := slices.Clone(c.Directories)
	if len(dirs) == 0 {
		dirs = []Directory{NewLocalDirectory(st)}
	}
	local := false
	for _, d := range dirs {
		if d == nil {
			return nil, invalid("nil directory in Config.Directories")
		}
		if ld, ok := d.(localDirectory); ok && sameStore(ld.st, st) {
			local = true
		}
	}
	return &Switchboard{st: st, cfg: c, now: c.Clock.Now, oidc: v, limits: l, quotas: c.Quotas.withDefaults(), dirs: dirs, localDir: local}, nil
}

// Table names. Keys inside them are described where they are written.
const (
	tPersonas     = "personas"       // persona id → personaRec
	tEdges        = "edges"          // edge id → edgeRec
	tEdgePending  = "edge_pending"   // from \x00 to → edge id (at most one pending per direction)
	tEdgeLive     = "edge_live"      // from \x00 to → edge id (at most one approved per direction)
	tGrants       = "grants"         // grant id → grantRec
	tCredIndex    = "grant_cred"     // sha256(credential) → grant id
	tTodos        = "todos"          // todo id → todoRec
	tReady        = "todo_ready"     // queue key \x00 prio \x00 available-at \x00 seq → todo id
	tLeases       = "todo_leases"    // queue key \x00 lease expiry \x00 todo id → ""
	tDedup        = "todo_dedup"     // grant id \x00 dedup key → todo id
	tByGrant      = "todo_grant"     // grant id \x00 seq → todo id
	tByQueue      = "todo_queue"     // queue key \x00 seq → todo id
	tGrantExp     = "grant_expiry"   // expiry, grant id → "" (grants that expire)
	tReplay       = "oidc_replay"    // sha256(id token) → expiry
	tReplayExp    = "oidc_expiry"    // expiry, sha256(id token) → "" (for purging)
	tEdgeByReq    = "edge_requester" // requester human \x00 edge id → pending expiry, or "" if approved (live edges)
	tEdgeByTarget = "edge_target"    // target human \x00 edge id → expiry (pending edges)
	tBuckets      = "quota_buckets"  // "req"|"tgt" \x00 human → bucket
	tCooldown     = "quota_cooldown" // requester human \x00 target persona → until
	tBlocks       = "blocks"         // blocking human \x00 blocked human → blockRec
	tEvents       = "events"         // seq → Event
	tMeta         = "meta"           // counters
)

// txn is one store transaction plus the helpers every operation shares.
type txn struct {
	tx  store.Tx
	now time.Time
}

// update runs fn in one store Update with the clock read once, so every
// record written by one operation carries the same time. The clock is read
// inside the transaction, not before it: transactions run one at a time, so
// their times follow their commit order however long one waited for its
// turn (a lease granted later never starts before one granted earlier).
func (s *Switchboard) update(ctx context.Context, fn func(*txn) error) error {
	return s.st.Update(ctx, func(tx store.Tx) error { return fn(&txn{tx: tx, now: s.now().UTC()}) })
}

// view runs fn in one store View, with the clock read inside it.
func (s *Switchboard) view(ctx context.Context, fn func(*txn) error) error {
	return s.st.View(ctx, func(tx store.Tx) error { return fn(&txn{tx: tx, now: s.now().UTC()}) })
}

// get decodes the record under key; a missing record is ErrNotFound with
// what as context.
func (t *txn) get(table string, key string, v any, what string) error {
	b, err := t.tx.Get(table, []byte(key))
	if errors.Is(err, store.ErrNotFound) {
		return notFound(what)
	}
	if err != nil {
		return fmt.Errorf("switchboard: read %s: %w", table, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("switchboard: decode %s %q: %w", table, key, err)
	}
	return nil
}

func (t *txn) put(table string, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("switchboard: encode %s: %w", table, err)
	}
	return t.tx.Put(table, []byte(key), b)
}

func (t *txn) putRaw(table string, key string, v string) error {
	return t.tx.Put(table, []byte(key), []byte(v))
}

func (t *txn) del(table string, key string) error {
	return t.tx.Delete(table, []byte(key))
}

// lookup returns the string value stored under key, or "" if absent.
func (t *txn) lookup(table, key string) (string, error) {
	b, err := t.tx.Get(table, []byte(key))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("switchboard: read %s: %w", table, err)
	}
	return string(b), nil
}

// nextSeq returns a store-wide increasing sequence number.
func (t *txn) nextSeq() (uint64, error) {
	var n uint64
	b, err := t.tx.Get(tMeta, []byte("seq"))
	switch {
	case err == nil:
		n = binary.BigEndian.Uint64(b)
	case !errors.Is(err, store.ErrNotFound):
		return 0, err
	}
	n++
	return n, t.tx.Put(tMeta, []byte("seq"), binary.BigEndian.AppendUint64(nil, n))
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p string) []byte {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return b[:i+1]
		}
	}
	return nil
}

// scanPrefix visits keys starting with prefix in order until fn returns
// false or an error.
func (t *txn) scanPrefix(table, prefix string, fn func(k, v string) (bool, error)) error {
	var ferr error
	err := t.tx.Scan(table, []byte(prefix), prefixEnd(prefix), func(k, v []byte) bool {
		more, err := fn(string(k), string(v))
		if err != nil {
			ferr = err
			return false
		}
		return more
	})
	if err != nil {
		return err
	}
	return ferr
}

// newID returns prefix_ followed by 96 random bits in hex.
func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("switchboard: crypto/rand failed: " + err.Error())
	}
	return prefix + "_" + hex.EncodeToString(b[:])
}

// be64 encodes n so that byte order equals numeric order.
func be64(n uint64) string { return string(binary.BigEndian.AppendUint64(nil, n)) }

// timeKey encodes t so that byte order equals time order (times before
// 1970 sort as 1970).
func timeKey(t time.Time) string {
	n := t.UnixNano()
	if n < 0 {
		n = 0
	}
	return be64(uint64(n))
}

// fromTimeKey decodes timeKey.
func fromTimeKey(k string) time.Time {
	if len(k) < 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64([]byte(k[:8])))).UTC()
}

const sep = "\x00"

func isClosed(err error) bool { return errors.Is(err, ErrClosed) }

// sameStore reports whether a and b are the same store value; stores of
// types that cannot be compared are never the same.
func sameStore(a, b store.Store) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// Clock is a source of time. The system clock is the default; a test clock
// lets tests move time forward without sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the clock's time once d has
	// passed on this clock, like time.After.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
