// The transaction wrapper, record encoding, key building and the table list
// (the schema, in one place).

package switchboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
)

// Table names. Keys inside them are described where they are written.
const (
	tPersonas     = "personas"       // persona id → personaRec
	tEdges        = "edges"          // edge id → edgeRec
	tEdgePending  = "edge_pending"   // from \x00 to → edge id (at most one pending per direction)
	tEdgeLive     = "edge_live"      // from \x00 to → edge id (at most one approved per direction)
	tGrants       = "grants"         // grant id → grantRec
	tCredIndex    = "grant_cred"     // sha256(credential) → grant id
	tTodos        = "todos"          // todo id (time-ordered) → todoRec
	tIdx          = "todo_index"     // every todo index, one B+tree: see the idx* kinds in todo.go
	tDedup        = "todo_dedup"     // grant id \x00 dedup key → todo id
	tGrantExp     = "grant_expiry"   // expiry, grant id → "" (grants that expire)
	tReplay       = "oidc_replay"    // sha256(id token) → expiry
	tReplayExp    = "oidc_expiry"    // expiry, sha256(id token) → "" (for purging)
	tEdgeByReq    = "edge_requester" // requester human \x00 edge id → pending expiry, or "" if approved (live edges)
	tEdgeByTarget = "edge_target"    // target human \x00 edge id → expiry (pending edges)
	tBuckets      = "quota_buckets"  // "req"|"tgt" \x00 human → bucket
	tCooldown     = "quota_cooldown" // requester human \x00 target persona → until
	tBlocks       = "blocks"         // blocking human \x00 blocked human → blockRec
	tEvents       = "events"         // seq → Event
	tEdgeEvents   = "edge_events"    // edge id \x00 event type → the event's seq (8 bytes), written as it enters the log
	tDamaged      = "damaged_todos"  // todo id \x00 todo-index key → its value: the entries of a damaged record set aside (see setAsideEntry)
	tMeta         = "meta"           // the audit log's state, its latest checkpoint, the sequencer's lease and the schema version
)

// txn is one store transaction plus the helpers every operation shares.
type txn struct {
	tx  store.Tx
	now time.Time
	hot *hotCache // decoded hot records; nil decodes every time

	readied map[string]bool // queue keys that got a ready todo

	// locker is the Tx's row locks in a transaction of updateLocked on a
	// store.LockingStore: the claim path reads the rows it changes through
	// it. nil in serializable transactions, where plain reads are safe.
	locker store.Locker
	// passed are the index keys a claim locked and left (the entry's
	// todo had moved on): a locked scan returns them again, and they
	// are not work another transaction holds (see heldElsewhere).
	passed map[string]bool
	// aside are the ids of damaged todos this transaction's claims set
	// aside (see setAside): a scan that reads them again passes over them.
	aside map[string]bool

	events      []Event        // emitted, flushed into the log (or pending) at the end
	lg          auditlog.Tx    // the audit log's part in the transaction: its state, once read
	logDirty    bool           // log changed (a todo seq) without an event to write it
	logged      int            // events this transaction added to the log
	revoked     []revokedGrant // grants revoked here whose queued todos are cancelled after commit
	pending     int            // events this transaction wrote pending, for the sequencer
	toldPending bool           // the store was told of them (store.Notifier): it tells this process too
	recordsV3   bool           // write todo records in the form V3 (the store is at layout 8)
	// damaged reports a damaged record a scan set aside (see setAside).
	damaged      *damageLog
	hooks        bool // webhooks are configured: outcomes queue deliveries
	hookAttempts int  // a delivery's MaxAttempts

	// sequenced are the events a sequencing pass added to the log, and
	// soleUntil until when no other process can add more (see recentLog):
	// once the pass commits they go to the Switchboard's recentLog, before
	// subscriptions are woken.
	sequenced []Event
	soleUntil time.Time
}

// update runs fn in one store Update with the clock read once, so every
// record written by one operation carries the same time. The clock is read
// inside the transaction, not before it: transactions run one at a time, so
// their times follow their commit order however long one waited for its
// turn (a lease granted later never starts before one granted earlier).
func (s *Switchboard) update(ctx context.Context, fn func(*txn) error) error {
	return s.updateWith(ctx, s.st.Update, false, fn)
}

// updateLocked is update for the claim path: on a store.LockingStore it
// runs in a transaction protected by row locks instead of serializable
// isolation (claimers then skip each other's rows instead of conflicting),
// and fn must read every todo and index row it changes through t's locked
// reads (t.todo, t.scanLocked); elsewhere it is update.
func (s *Switchboard) updateLocked(ctx context.Context, fn func(*txn) error) error {
	if ls, ok := s.st.(store.LockingStore); ok {
		return s.updateWith(ctx, ls.UpdateLocked, true, fn)
	}
	return s.update(ctx, fn)
}

func (s *Switchboard) updateWith(ctx context.Context, run func(context.Context, func(store.Tx) error) error, locking bool, fn func(*txn) error) error {
	var last *txn // fn may run more than once; the last run is what committed
	err := run(ctx, func(tx store.Tx) error {
		last = &txn{tx: tx, now: s.now().UTC(), hot: &s.hot, recordsV3: s.recordsV3.Load(), damaged: &s.damaged}
		if s.cfg.Webhooks != nil {
			last.hooks, last.hookAttempts = true, s.cfg.Webhooks.MaxAttempts
		}
		if locking {
			l, ok := tx.(store.Locker)
			if !ok {
				return errors.New("switchboard: the store's locking transaction cannot lock rows")
			}
			last.locker = l
		}
		last.lg = logLayout.In(tx, last.locker)
		last.lg.Packed = s.packedLog.Load()
		if err := fn(last); err != nil {
			return err
		}
		if err := last.flushEvents(); err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		if n, ok := tx.(store.Notifier); ok && s.watched {
			// A store shared by several processes: tell the others too.
			for q := range last.readied {
				n.Notify(q)
			}
			if last.logged > 0 {
				n.Notify(commitsKey)
			}
			if last.pending > 0 {
				n.Notify(pendingKey)
				last.toldPending = true
			}
		}
		return nil
	})
	if err == nil && last != nil && len(last.revoked) > 0 {
		// The one place a revocation's queued work is cancelled, whatever
		// revoked it (Revoke, Reap on expiry, an approval replacing an
		// expired grant): after the revocation committed, in passes (see
		// cancelQueued). Meanwhile no claim takes that work (originLive).
		// A pass that fails does not undo the revocation, which holds: it
		// is logged, and revoking the grant again finishes it — except
		// inside the caller's transaction, where nothing has committed
		// yet and the failure is the call's (the caller's rollback
		// undoes the revocation with it).
		if cerr := s.cancelRevoked(ctx, last.revoked); cerr != nil {
			if store.IsInCallersTx(ctx) {
				return cerr
			}
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "switchboard: a grant is revoked, but cancelling its queued todos failed; no claim takes them, and revoking it again finishes",
				slog.String("error", cerr.Error()))
		}
	}
	if err == nil && last != nil {
		// Strictly after commit: wake the claims blocked on the queues
		// that got work, the subscriptions if the log grew, and the
		// sequencer if events wait for it.
		if last.sequenced != nil {
			s.recent.add(last.sequenced, last.soleUntil)
		}
		for q := range last.readied {
			s.wake.signal(q)
		}
		if last.logged > 0 {
			s.commits.signal(commitsKey)
		}
		if last.pending > 0 && !last.toldPending {
			// (Told to the store, the commit comes back to this
			// process's sequencer from it: woken twice for one commit,
			// it would run a pass that finds nothing.)
			s.commits.signal(pendingKey)
		}
	}
	return err
}

// scanLocked is Scan of at most limit rows (≤ 0: no bound), locking each
// row read in a row-locked transaction (rows other transactions hold are
// skipped there).
func (t *txn) scanLocked(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	if t.locker != nil {
		return t.locker.ScanLocked(table, start, end, limit, fn)
	}
	if limit <= 0 {
		return t.tx.Scan(table, start, end, fn)
	}
	n := 0
	return t.tx.Scan(table, start, end, func(k, v []byte) bool {
		n++
		return fn(k, v) && (limit <= 0 || n < limit)
	})
}

// scanBounded is scanLocked for an fn that itself stops after limit rows:
// without row locks it is a plain Scan, with no wrapper.
func (t *txn) scanBounded(table string, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	if t.locker != nil {
		return t.locker.ScanLocked(table, start, end, limit, fn)
	}
	return t.tx.Scan(table, start, end, fn)
}

// anyIn reports whether [start, end) of table may hold a row, from a plain
// read: in a row-locked transaction it saves the locked scan that would
// find nothing (on a server store the plain read is shared by the batch);
// elsewhere it says true, and the scan itself looks. A read error says
// true too: the scan that follows reports it.
func (t *txn) anyIn(table string, start, end []byte) bool {
	if t.locker == nil {
		return true
	}
	found := false
	if err := t.tx.Scan(table, start, end, func(_, _ []byte) bool { found = true; return false }); err != nil {
		return true
	}
	return found
}

// view runs fn in one store View, with the clock read inside it.
func (s *Switchboard) view(ctx context.Context, fn func(*txn) error) error {
	return s.st.View(ctx, func(tx store.Tx) error {
		t := &txn{tx: tx, now: s.now().UTC(), hot: &s.hot, damaged: &s.damaged}
		t.lg = logLayout.In(tx, nil)
		t.lg.Packed = s.packedLog.Load()
		return fn(t)
	})
}

// get decodes the record under key; a missing record is ErrNotFound with
// what as context.
func (t *txn) get(table string, key string, v any, what string) error {
	b, err := t.tx.Get(table, []byte(key))
	if errors.Is(err, store.ErrNotFound) {
		return notFound(what)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	if err := decodeRecord(b, v); err != nil {
		return fmt.Errorf("decode %s %q: %w", table, key, err)
	}
	return nil
}

// storedRecord and loadedRecord are record types with a stored form of
// their own (see grantRec): put and get use it directly. A binaryRecord's
// stored form is binary (see todoFormatV1), and put writes it as it is.
type (
	storedRecord interface{ storedForm() any }
	loadedRecord interface{ loadStored([]byte) error }
	binaryRecord interface {
		appendStored([]byte) ([]byte, error)
	}
)

// decodeRecord decodes stored record b into v. A record that does not
// decode — or, checksummed, does not match its checksum — is ErrDamaged:
// this code wrote it whole, so its bytes changed underneath.
func decodeRecord(b []byte, v any) error {
	var err error
	if r, ok := v.(loadedRecord); ok {
		err = r.loadStored(b)
	} else {
		err = json.Unmarshal(b, v)
	}
	if err != nil && !errors.Is(err, ErrDamaged) {
		return fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	return err
}

// hotCache remembers the decoded form of hot records — grants, read by
// every agent call, and edges — keyed by their exact stored bytes, so a
// record read again unchanged is not decoded again. Keying by the bytes
// (not the record's id) makes a hit always right, whoever changed the
// store: a record another process rewrote has other bytes and misses.
//
// It also remembers which grant a credential named when it last
// authenticated (grantOf), so the next call reads the grant without first
// looking the credential up: a credential is random, so its hash names
// one grant for good, and the grant's record — which must still hold
// that hash and be live — decides as before.
type hotCache struct {
	mu sync.Mutex
	m  map[string]map[string]any // table → stored bytes → decoded record (a *T, never changed)
	n  int                       // entries in m
	// creds maps a credential's hash to its grant's id; emptied when
	// it holds hotCacheSize.
	creds map[string]string
}

// credGrant returns the grant id a credential hash named when it last
// authenticated, or "".
func (c *hotCache) credGrant(hash string) string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.creds[hash]
}

// knows reports whether a's credential authenticated before in this
// process (and has not failed since).
func (c *hotCache) knows(a Auth) bool {
	if a == nil {
		return false
	}
	cred, _ := a.presentation()
	h := cred.hash()
	return c.credGrant(string(h[:])) != ""
}

// setCredGrant remembers (id != "") or forgets the grant of a credential
// hash.
func (c *hotCache) setCredGrant(hash, id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == "" {
		delete(c.creds, hash)
		return
	}
	if c.creds == nil || len(c.creds) >= hotCacheSize {
		c.creds = make(map[string]string)
	}
	c.creds[hash] = id
}

// hotCacheSize bounds the cache; it is emptied when full.
const hotCacheSize = 4096

// hotRecord is a record type the hot cache may hold: clone returns a deep
// copy, so no caller — nor a user handed the record — can change the
// cached value through a shared slice.
type hotRecord[T any] interface{ clone() T }

// getHot is get for a hot record type: it returns a deep copy of the
// decoded record, from the cache when the stored bytes are ones it decoded
// before.
func getHot[T hotRecord[T]](t *txn, table, key, what string) (*T, error) {
	v, err := viewHot[T](t, table, key, what)
	if err != nil {
		return nil, err
	}
	c := (*v).clone()
	return &c, nil
}

// viewHot is getHot for a caller that only reads the record: with a hot
// cache it returns the cached decoded record itself, shared with every
// other reader, which nobody may change (nor hand out: a record given to
// a user is a clone). Authentication, on every agent call, reads grants
// this way.
func viewHot[T hotRecord[T]](t *txn, table, key, what string) (*T, error) {
	b, err := t.tx.Get(table, []byte(key))
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(what)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	if t.hot != nil {
		t.hot.mu.Lock()
		v, ok := t.hot.m[table][string(b)].(*T) // looked up without copying b
		t.hot.mu.Unlock()
		if ok {
			return v, nil
		}
	}
	v := new(T)
	if err := decodeRecord(b, v); err != nil {
		return nil, fmt.Errorf("decode %s %q: %w", table, key, err)
	}
	if t.hot != nil {
		t.hot.mu.Lock()
		if t.hot.m == nil || t.hot.n >= hotCacheSize {
			t.hot.m, t.hot.n = make(map[string]map[string]any), 0
		}
		m := t.hot.m[table]
		if m == nil {
			m = make(map[string]any)
			t.hot.m[table] = m
		}
		if _, ok := m[string(b)]; !ok {
			t.hot.n++
		}
		m[string(b)] = v
		t.hot.mu.Unlock()
	}
	return v, nil
}

// put writes record v under key in its stored form.
func (t *txn) put(table string, key string, v any) error {
	b, err := t.encode(table, v)
	if err != nil {
		return err
	}
	return t.tx.Put(table, []byte(key), b)
}

// encode is record v's stored form: a todo in the form the store's layout
// takes (see UpgradeRecords), another binary record in its own, the rest
// as JSON.
func (t *txn) encode(table string, v any) ([]byte, error) {
	var b []byte
	var err error
	if r, ok := v.(todoRec); ok && t.recordsV3 {
		b, err = r.appendStoredV3(make([]byte, 0, r.storedSize()))
	} else if r, ok := v.(*todoRec); ok && t.recordsV3 {
		b, err = r.appendStoredV3(make([]byte, 0, r.storedSize()))
	} else if r, ok := v.(binaryRecord); ok {
		b, err = r.appendStored(nil)
	} else {
		if r, ok := v.(storedRecord); ok {
			v = r.storedForm()
		}
		b, err = json.Marshal(v)
	}
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", table, err)
	}
	return b, nil
}

// insertNew writes a row whose key is new — made of an id or a sequence
// number this transaction drew, so in no committed row (one this
// transaction deleted before is fine: the overlay takes that Insert as a
// Put) — as an Insert where the store has one (store.Inserter): for
// PostgreSQL an INSERT, with no look for a row to update first.
func (t *txn) insertNew(table string, key, value []byte) error {
	if ins, ok := t.tx.(store.Inserter); ok {
		return ins.Insert(table, key, value)
	}
	return t.tx.Put(table, key, value)
}

func (t *txn) putRaw(table string, key string, v string) error {
	t.noteReady(table, key)
	return t.tx.Put(table, []byte(key), []byte(v))
}

// putRawNew is putRaw for a key that is new (see insertNew).
func (t *txn) putRawNew(table string, key string, v string) error {
	t.noteReady(table, key)
	return t.insertNew(table, []byte(key), []byte(v))
}

// noteReady notes a ready index entry written: its queue's blocked claims
// wake after commit.
func (t *txn) noteReady(table, key string) {
	if table == tIdx && len(key) > 0 && key[0] == idxReady {
		// A ready todo: its queue's blocked claims wake after commit.
		if i := strings.IndexByte(key, 0); i > 1 {
			if t.readied == nil {
				t.readied = map[string]bool{}
			}
			t.readied[key[1:i]] = true
		}
	}
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
		return "", fmt.Errorf("read %s: %w", table, err)
	}
	return string(b), nil
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
	return t.scanPrefixFrom(table, prefix, "", fn)
}

// scanPrefixFrom is scanPrefix starting at prefix+from.
func (t *txn) scanPrefixFrom(table, prefix, from string, fn func(k, v string) (bool, error)) error {
	var ferr error
	err := t.tx.Scan(table, []byte(prefix+from), prefixEnd(prefix), func(k, v []byte) bool {
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

// newOrderedID returns prefix_ followed by 48 bits of the time in
// milliseconds and 80 random bits, in hex: ids made later sort later, so
// records keyed by them are appended to their B+tree instead of landing
// on a random page of it.
func newOrderedID(prefix string, now time.Time) string {
	var b [16]byte
	ms := uint64(max(now.UnixMilli(), 0))
	binary.BigEndian.PutUint64(b[:8], ms<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic("switchboard: crypto/rand failed: " + err.Error())
	}
	return prefix + "_" + hex.EncodeToString(b[:])
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
	// UnixNano wraps outside 1678–2262; clamp first so a far time keys as
	// the latest (or earliest) possible instant, never as one near now.
	// Inputs are refused outside [1970, 2200) by checkTime anyway.
	switch {
	case t.Before(earliestTime):
		return be64(0)
	case !t.Before(latestTime):
		return be64(uint64(latestTime.UnixNano()))
	}
	return be64(uint64(t.UnixNano()))
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

// scanBySeq calls fn with the ids under the given prefixes of the todo
// index, whose keys are prefix + seq(8), merged in seq order from seq from
// on, until fn returns false. An id under two prefixes is passed once.
func (t *txn) scanBySeq(from uint64, fn func(id string) (bool, error), prefixes ...string) error {
	if len(prefixes) == 1 { // nothing to merge: one scan, streamed
		p := prefixes[0]
		return t.scanPrefixFrom(tIdx, p, be64(from), func(k, id string) (bool, error) {
			if len(k) != len(p)+8 {
				return true, nil
			}
			return fn(id)
		})
	}
	srcs := make([]*seqSource, len(prefixes))
	for i, p := range prefixes {
		srcs[i] = &seqSource{t: t, prefix: p, from: from, more: true}
	}
	last := ""
	for {
		var min *seqEntry
		var at *seqSource
		for _, s := range srcs {
			e, err := s.peek()
			if err != nil {
				return err
			}
			if e != nil && (min == nil || e.seq < min.seq) {
				min, at = e, s
			}
		}
		if min == nil {
			return nil
		}
		at.i++
		if min.id == last {
			continue
		}
		last = min.id
		if more, err := fn(min.id); err != nil || !more {
			return err
		}
	}
}

type seqEntry struct {
	seq uint64
	id  string
}

// seqSource reads one seq-keyed prefix of the todo index in order, a chunk
// at a time.
type seqSource struct {
	t      *txn
	prefix string
	from   uint64 // the next chunk starts here
	buf    []seqEntry
	i      int
	more   bool // entries may follow buf
}

const seqChunk = 64

func (s *seqSource) peek() (*seqEntry, error) {
	if s.i < len(s.buf) {
		return &s.buf[s.i], nil
	}
	if !s.more {
		return nil, nil
	}
	s.buf, s.i, s.more = s.buf[:0], 0, false
	err := s.t.tx.Scan(tIdx, []byte(s.prefix+be64(s.from)), prefixEnd(s.prefix), func(k, v []byte) bool {
		if len(k) != len(s.prefix)+8 {
			return true // not this prefix's shape (a longer scope sharing it)
		}
		if len(s.buf) == seqChunk {
			s.more = true
			return false
		}
		s.buf = append(s.buf, seqEntry{seq: binary.BigEndian.Uint64(k[len(s.prefix):]), id: string(v)})
		return true
	})
	if err != nil {
		return nil, err
	}
	if n := len(s.buf); n > 0 {
		s.from = s.buf[n-1].seq + 1
	}
	if len(s.buf) == 0 {
		return nil, nil
	}
	return &s.buf[0], nil
}

// setAsideEntry is setAside for a scan that reached the record through
// key, an entry of the todo index that drives work (ready, delayed, lease,
// ended) with value: the entry moves out of the index into tDamaged, so
// no later scan meets it again — no batch fills with damaged records, no
// pass counts them as work — and Reap puts the record's entries back once
// it reads again (restored from a backup; see restoreDamaged).
func (t *txn) setAsideEntry(err error, id, key, value string) (bool, error) {
	if !t.setAside(err, id) {
		return false, nil
	}
	if key == "" {
		return true, nil
	}
	if err := t.del(tIdx, key); err != nil {
		return true, err
	}
	return true, t.tx.Put(tDamaged, []byte(id+sep+key), []byte(value))
}

// restoreDamaged looks again at up to limit damaged records set aside: a
// record that reads again (restored from a backup) gets the index entries
// its state calls for, written afresh (reindex), and leaves tDamaged; one
// deleted since leaves it; one still damaged stays, and is not reported
// again. It returns how many records it restored.
func (t *txn) restoreDamaged(limit int) (int, error) {
	var keys [][]byte
	if err := t.tx.Scan(tDamaged, nil, nil, func(k, _ []byte) bool {
		keys = append(keys, bytes.Clone(k))
		return len(keys) < limit
	}); err != nil {
		return 0, err
	}
	restored := map[string]bool{}
	for _, k := range keys {
		id, _, _ := strings.Cut(string(k), sep)
		r, err := t.todo(id)
		switch {
		case errors.Is(err, ErrDamaged):
			continue
		case isNotFound(err):
		case err != nil:
			return 0, err
		case !restored[id]:
			if err := t.reindex(r); err != nil {
				return 0, err
			}
			restored[id] = true
		}
		if err := t.tx.Delete(tDamaged, k); err != nil {
			return 0, err
		}
	}
	return len(restored), nil
}

// setAside reports whether err is a damaged todo record (ErrDamaged) that
// the scan reading it passes over — the housekeeping and the claims that
// go through every todo of a queue, a grant or the store — and reports it
// once to Config.Logger. A damaged record is never handed out, expired,
// cancelled or purged: it stays as it is, for its owner to restore, and
// one damaged record stops no other work. Reading it by its id (Get,
// Cancel, a list of its queue) is ErrDamaged.
func (t *txn) setAside(err error, id string) bool {
	if !errors.Is(err, ErrDamaged) {
		return false
	}
	if t.damaged != nil {
		t.damaged.note(tTodos, id, err)
	}
	return true
}
