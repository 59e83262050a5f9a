// Config, New and Clock: how a Switchboard is configured, defaulted and built.

package switchboard

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
)

// Config configures a Switchboard. A nil *Config, and every zero field,
// means the documented default.
type Config struct {
	// Clock is the source of the library's time: timestamps, expiries,
	// token freshness, lease lengths, the reaper's and the sequencer's
	// schedules, a blocking Claim's polling and Work's heartbeats all
	// follow it. Default the system clock. Tests inject a fake clock here
	// and advance it instead of sleeping. Only the pauses before retrying
	// a failed store call (in Work) are on the wall clock: a store
	// recovers in real time.
	Clock Clock

	// Issuers is the allow-list of OIDC identity providers whose ID tokens
	// may prove the human behind a friend request. With no issuers every
	// friend request is refused with ErrProvenance.
	Issuers []Issuer
	// HTTPClient is used for OIDC discovery and JWKS fetches. Default a new
	// http.Client with a 10 second timeout (not http.DefaultClient).
	HTTPClient *http.Client
	// Logger receives what switchboard cannot return to a caller: the
	// errors of the background Reap in Run, each failed webhook delivery
	// (the webhook's id and why; its recorded error says the same, in
	// InspectTodos of queue "~system/webhooks"), a Work handler's
	// outcome that could not be recorded, a revocation's unfinished
	// cancel pass, and a damaged record set aside (ErrDamaged). Records
	// never hold a credential, token, pickup secret or webhook URL.
	// Default: discard.
	Logger *slog.Logger
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
	// PickupWindow is how long after approval the requesting agent may
	// Collect its credential. Default 7 days. After it, Reap revokes the
	// uncollected grant and its edge.
	PickupWindow time.Duration
	// DefaultLease is the lease length of a Claim that names none and whose
	// grant sets no default. Default 5 minutes.
	DefaultLease time.Duration
	// MaxLease bounds a lease. Default 24 hours.
	MaxLease time.Duration
	// MaxAttempts is the default number of attempts before a todo is
	// dead-lettered. Default 5.
	MaxAttempts int
	// PollInterval is how often a blocking Claim or a Subscription re-checks
	// the store for work written by another process; work created through
	// this Switchboard wakes it at once, and so does work from another
	// process when the store announces commits (a store.Watcher, such as the
	// PostgreSQL store) — the poll is then the fallback for announcements
	// lost with a connection. Default 1 second.
	PollInterval time.Duration
	// ReapInterval is how often Run calls Reap. Default 5 seconds.
	ReapInterval time.Duration
	// ReapTimeout bounds each Reap that Run calls: a pass that reaches it
	// (a CheckpointStore, an Archive hook or a store that hangs) ends with
	// what it committed so far, and the next starts at the next tick.
	// Witnesses are bounded tighter, each by its WitnessConfig.Timeout.
	// Default 1 minute.
	ReapTimeout time.Duration
	// DedupRetention is how long a dedup key keeps returning its todo after
	// the todo ended. Default 24 hours.
	DedupRetention time.Duration
	// TodoRetention is how long an ended todo (done, dead or cancelled) is
	// kept after it ended; Reap then deletes it with its index entries and
	// dedup key, so the store's size follows live work, not history. A todo
	// is kept at least DedupRetention, for its dedup key. Default 7 days;
	// negative keeps ended todos forever.
	TodoRetention time.Duration
	// EventRetention is how long an audit event is kept; Reap then hands
	// it to Archive (if set) and deletes it, keeping the tree hashes that
	// proofs over later events need. It never purges past a checkpoint the
	// log is checked against — the stored one, the one Checkpoints keeps,
	// the last each witness cosigned — so an event waits for all of them to
	// move past it. Default 30 days; negative keeps events forever.
	EventRetention time.Duration
	// LogKey signs the audit log's checkpoints: a note signer key, as
	// NewLogKey makes (golang.org/x/mod/sumdb/note's "PRIVATE+KEY+…"
	// form, Ed25519). Keep it out of the store — in a secret manager or
	// the host's configuration — so that whoever can write the store
	// cannot sign a rewritten log. Without it the log is still a Merkle
	// tree that VerifyAudit checks and proofs cover, but Checkpoint
	// returns ErrNoLogKey.
	LogKey string
	// PreviousLogKeys are the public (verifier) keys, as LogVerifierKey
	// gave them, of keys that signed this log's checkpoints before LogKey:
	// a checkpoint one of them signed is still accepted — the stored one,
	// kept ones, the CLI's — and the first checkpoint LogKey signs must be
	// consistent with it, like any other. Every key must carry LogKey's
	// name (the log's origin). See docs/audit-log.md, "Rotating the key".
	PreviousLogKeys []string
	// Checkpoints, if set, keeps each checkpoint the Switchboard signs
	// outside the store (CheckpointFile is one, in a file) — written once
	// the store committed it, never under an application's transaction —
	// and is read back before every signature: the stored log must still
	// hold the checkpoint kept there, and a new signature extends it, so
	// that whoever can write the store cannot delete or roll back the
	// record of what was signed and rewrite the log after it without the
	// next signature, and CheckLog, refusing. Retention never purges past
	// it.
	Checkpoints CheckpointStore
	// Witnesses cosign each checkpoint after checking that it extends the
	// last one they cosigned for this log (C2SP tlog-witness): see
	// WitnessConfig and Checkpoint for what each answer does. They are
	// asked at once, each within its Timeout, after the checkpoint is
	// signed and before it is stored; their cosignatures are stored with
	// it, and one a witness refused is never stored. Retention never
	// purges past the last checkpoint a configured witness cosigned, and
	// not at all while the store records none for one (a witness new to
	// the configuration, or one a restored backup forgot): it may hold
	// any of the log, and must still be given a proof from it.
	Witnesses []WitnessConfig
	// SequencerLease is how long the process that sequences the audit log
	// holds the job before another may take it over — the longest the log
	// stalls after that process dies. Only stores whose writers run
	// concurrently (store.Appender, such as PostgreSQL) have a sequencer;
	// elsewhere events are sequenced as they commit. Default 5 seconds.
	SequencerLease time.Duration
	// ArchiveTodos, if set, receives ended todos (done, dead or cancelled)
	// past TodoRetention before Reap deletes them — results and dead
	// letters included — at least once: a crash between archiving and
	// purging hands the same todos again (key them by ID). If it returns
	// an error the todos are kept and offered again at the next Reap; a
	// todo redriven meanwhile is not purged.
	ArchiveTodos func(ctx context.Context, todos []Todo) error
	// Archive, if set, receives audit events before Reap purges them, in
	// seq order, at least once (a crash between archiving and purging hands
	// the same events again: key them by Seq). If it returns an error the
	// events are kept and offered again at the next Reap.
	Archive func(ctx context.Context, events []Event) error

	// Directories are the only places a friend request's target is looked
	// up, in order. Default: NewLocalDirectory over the Switchboard's store.
	// A target must resolve in one of them and be a discoverable persona
	// published in the store (whose human can approve).
	Directories []Directory

	// Quotas bound friend requests per human; see Quotas for the defaults.
	Quotas Quotas

	// Limits bounds input sizes. Zero fields take the values of
	// DefaultLimits().
	Limits Limits

	// Observer, if set, sees every queue verb and every Work handler call
	// (for tracing and metrics: module sbotel, sbotel.New(tp, mp), is one).
	Observer Observer

	// Webhooks, if set, turns webhooks on: grants holding VerbWebhook may
	// register destinations (RegisterWebhook), and Run delivers to them.
	Webhooks *WebhookConfig

	// DPoP tunes how proofs for grants bound to a key are checked (see
	// Prove); nil means the defaults. Key-bound grants work without it.
	DPoP *DPoPConfig
}

// The Config defaults, one place per setting; the field docs name them.
const (
	defaultHTTPTimeout        = 10 * time.Second
	defaultMaxTokenAge        = 10 * time.Minute
	defaultClockLeeway        = time.Minute
	defaultKeyRefetchInterval = time.Minute
	defaultPendingTTL         = 7 * 24 * time.Hour
	defaultPickupWindow       = 7 * 24 * time.Hour
	defaultLease              = 5 * time.Minute
	defaultMaxLease           = 24 * time.Hour
	defaultDedupRetention     = 24 * time.Hour
	defaultTodoRetention      = 7 * 24 * time.Hour
	defaultEventRetention     = 30 * 24 * time.Hour
	defaultPollInterval       = time.Second
	defaultReapInterval       = 5 * time.Second
	defaultReapTimeout        = time.Minute
	defaultSequencerLease     = 5 * time.Second
	defaultMaxAttempts        = 5
)

// orDuration sets *d to v when it is zero.
func orDuration(d *time.Duration, v time.Duration) {
	if *d == 0 {
		*d = v
	}
}

// orInt sets *p to v when it is zero.
func orInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

// Switchboard is the library's entry point: every operation is a method on
// it. It holds no state of its own beyond configuration and caches; all
// records live in the Store, so several Switchboard values (in one process
// or several) may share one store. It is safe for concurrent use.
type Switchboard struct {
	st        store.Store
	recordsV3 atomic.Bool // the store's layout lets todo records be V3 (see UpgradeRecords)
	packedLog atomic.Bool // the store's layout lets audit events be stored several to a record
	damaged   damageLog   // damaged records already reported
	cfg       Config
	now       func() time.Time
	oidc      *verifier
	limits    Limits
	dpop      DPoPConfig // Config.DPoP with its defaults
	// proofHeaders are the DPoP proof headers checked so far.
	proofHeaders proofHeaderCache
	quotas       Quotas
	dirs         []Directory
	// localDir: one of dirs is the local directory of st, so a persona in
	// st that is discoverable resolves without asking the others.
	localDir bool
	wake     waker // per queue key: blocked claims
	commits  waker // commitsKey: subscriptions, after any commit that grew the log
	// recent are the events this process's sequencer added last, for
	// subscriptions in this process.
	recent recentLog
	hot    hotCache
	// watched: st is a store.Watcher, so commits are also announced to the
	// other processes sharing it (and theirs to this one).
	watched bool
	unwatch func()
	// seq is this Switchboard's part in sequencing the audit log, on a
	// store whose transactions are store.Appenders (nil otherwise).
	seq       *sequencer
	closeOnce sync.Once
	// The audit log's signing key (Config.LogKey), if any.
	logSigner    note.Signer
	logVerifier  note.Verifier
	logVKey      string
	logVerifiers []note.Verifier // logVerifier, then PreviousLogKeys'
	logProblem   logProblem      // the last checkpoint problem, reported once
	seen         auditlog.Mark   // the largest tree this process sequenced or signed
	witnesses    *auditlog.Witnesses
}

// notified wakes this process's waiters for a key another process's commit
// announced (see store.Watcher).
func (s *Switchboard) notified(key string) {
	if key == store.Resync {
		s.commits.signalAll()
		s.wake.signalAll()
		return
	}
	if key == commitsKey || key == pendingKey {
		s.commits.signal(key)
		return
	}
	s.wake.signal(key)
}

// New returns a Switchboard over st, upgrading an older store's layout in
// place first. The caller keeps ownership of st and closes it after
// Close. New starts the audit log's sequencer and the store's
// notifications, not Run (see Run). Errors: ErrNewerSchema for a store a
// newer version wrote; ErrInvalidArgument for an unusable Config (a
// LogKey that is not a note signer key, a WebhookConfig.Key under 32
// bytes, an issuer without URL or ClientID); an *AuditError
// (ErrAuditBroken) when an older store's hash chain does not verify
// during the upgrade; the store's own errors.
func New(st store.Store, cfg *Config) (*Switchboard, error) {
	s, err := newSwitchboard(st, cfg)
	if err != nil {
		return nil, fmt.Errorf("switchboard: new: %w", inner(err))
	}
	return s, nil
}

func newSwitchboard(st store.Store, cfg *Config) (*Switchboard, error) {
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: defaultHTTPTimeout}
	}
	orDuration(&c.MaxTokenAge, defaultMaxTokenAge)
	orDuration(&c.ClockLeeway, defaultClockLeeway)
	orDuration(&c.KeyRefetchInterval, defaultKeyRefetchInterval)
	orDuration(&c.PendingTTL, defaultPendingTTL)
	orDuration(&c.PickupWindow, defaultPickupWindow)
	orDuration(&c.DefaultLease, defaultLease)
	orDuration(&c.MaxLease, defaultMaxLease)
	orDuration(&c.DedupRetention, defaultDedupRetention)
	orDuration(&c.TodoRetention, defaultTodoRetention)
	orDuration(&c.EventRetention, defaultEventRetention)
	orDuration(&c.PollInterval, defaultPollInterval)
	orDuration(&c.ReapInterval, defaultReapInterval)
	orDuration(&c.ReapTimeout, defaultReapTimeout)
	orDuration(&c.SequencerLease, defaultSequencerLease)
	orInt(&c.MaxAttempts, defaultMaxAttempts)
	for _, d := range []time.Duration{c.PollInterval, c.ReapInterval, c.ReapTimeout, c.SequencerLease, c.KeyRefetchInterval, c.MaxTokenAge, c.ClockLeeway, c.PendingTTL, c.PickupWindow, c.DefaultLease, c.MaxLease, c.DedupRetention} {
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
	c.Limits = c.Limits.withDefaults()
	wh, err := c.Webhooks.withDefaults()
	if err != nil {
		return nil, err
	}
	c.Webhooks = wh
	dp, err := c.DPoP.withDefaults()
	if err != nil {
		return nil, err
	}
	l := c.Limits
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
	layout, err := migrate(context.Background(), st, c.Clock.Now)
	if err != nil {
		return nil, fmt.Errorf("switchboard: open store: %w", err)
	}
	s := &Switchboard{st: st, cfg: c, now: c.Clock.Now, oidc: v, limits: l, dpop: dp, quotas: c.Quotas.withDefaults(), dirs: dirs, localDir: local}
	s.damaged.logger = c.Logger
	s.setLayout(layout)
	if c.LogKey != "" {
		keys, err := auditlog.ParseKeys(c.LogKey, c.PreviousLogKeys...)
		if err != nil {
			return nil, fmt.Errorf("switchboard: %w", invalid("Config.LogKey or PreviousLogKeys: %v", err))
		}
		s.logSigner, s.logVerifier, s.logVKey, s.logVerifiers = keys.Signer, keys.Verifiers[0], keys.VerifierKey, keys.Verifiers
		if s.witnesses, err = auditlog.NewWitnesses(c.Witnesses); err != nil {
			why := strings.TrimPrefix(err.Error(), auditlog.ErrWitnessConfig.Error()+": ")
			return nil, fmt.Errorf("switchboard: %w", invalid("Config.Witnesses%s", why))
		}
	} else if len(c.PreviousLogKeys) > 0 || len(c.Witnesses) > 0 || c.Checkpoints != nil {
		return nil, fmt.Errorf("switchboard: %w", invalid("Config.PreviousLogKeys, Witnesses and Checkpoints need Config.LogKey"))
	}
	appends := false
	if err := st.View(context.Background(), func(tx store.Tx) error {
		_, appends = tx.(store.Appender)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("switchboard: open store: %w", err)
	}
	if w, ok := st.(store.Watcher); ok {
		s.unwatch = w.Watch(s.notified)
		s.watched = true
	}
	if appends {
		s.startSequencer()
	}
	return s, nil
}

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

// damageLog reports the damaged records scans set aside, once per record
// and process, at error level: nothing else will say that work is stuck
// there. A transaction holds a pointer to its Switchboard's (no closure
// per transaction).
type damageLog struct {
	logger *slog.Logger
	seen   sync.Map // table \x00 key → struct{}
}

func (d *damageLog) note(table, key string, err error) {
	if _, seen := d.seen.LoadOrStore(table+"\x00"+key, struct{}{}); seen {
		return
	}
	d.logger.LogAttrs(context.Background(), slog.LevelError,
		"switchboard: a damaged record is set aside: claims, Reap and revocations pass over it; restore it from a backup",
		slog.String("table", table), slog.String("key", key), slog.String("error", err.Error()))
}
