// Time-driven work: Reap and Run.

package switchboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// ReapStats counts what one Reap did.
type ReapStats struct {
	LeasesExpired int // leases past expiry: re-queued or dead-lettered
	EdgesExpired  int // pending friend requests past their expiry
	GrantsExpired int // grants past their expiry or pickup window, revoked
	TokensPurged  int // remembered ID token hashes whose tokens expired
	TodosPurged   int // ended todos past Config.TodoRetention, deleted
	EventsPurged  int // audit events past Config.EventRetention, archived and deleted
	// LogProblem is why this Reap could not checkpoint the audit log
	// (see Switchboard.LogProblem); nil if it could. Audit events are not
	// purged while it is an *AuditError or a key problem.
	LogProblem error
}

// reapBatch bounds the work of one Reap transaction per kind.
const reapBatch = 500

// Reap does the time-driven work: in one transaction it re-delivers expired
// leases (dead-lettering todos out of attempts), expires pending friend
// requests past their expiry (cancelling their approval todos), revokes
// grants past their expiry (cancelling their queued todos), forgets the
// hashes of used ID tokens that have expired and deletes ended todos past
// Config.TodoRetention; then, with Config.LogKey, it signs a checkpoint of
// the audit log if the log grew (see Checkpoint), and it archives
// (Config.Archive) and deletes audit events past Config.EventRetention, in
// transactions of their own. A checkpoint problem stops none of the rest
// but the audit purge: it is logged once per distinct error, returned in
// ReapStats.LogProblem (and by LogProblem), and audit events are kept
// until the log is sound again (a witness that cannot be reached or does
// not accept the log's key does not hold them back, but no event is purged
// past the last checkpoint a configured witness cosigned). Each kind is
// bounded per call; call again while it reports work. Correctness never
// depends on it — Claim recovers expired leases and every check compares
// expiry times — but it keeps queues and approval lists tidy.
func (s *Switchboard) Reap(ctx context.Context) (ReapStats, error) {
	var st ReapStats
	err := s.update(ctx, func(t *txn) error {
		st = ReapStats{}
		if err := s.readLayout(t); err != nil { // UpgradeRecords run by another process
			return err
		}
		now := timeKey(t.now)
		if _, err := t.restoreDamaged(reapBatch); err != nil {
			return err
		}
		var leases [][2]string // id, its lease entry
		err := t.scanPrefix(tIdx, string(idxLease), func(k, _ string) (bool, error) {
			// 'l' queue key \x00 expiry(8) todo id
			if i := strings.IndexByte(k, 0); i > 0 && len(k) > i+9 && k[i+1:i+9] <= now {
				leases = append(leases, [2]string{k[i+9:], k})
			}
			return len(leases) < reapBatch, nil
		})
		if err != nil {
			return err
		}
		for _, l := range leases {
			ended, err := t.expireLease(l[0], l[1])
			if err != nil {
				return err
			}
			if ended {
				st.LeasesExpired++
			}
		}

		var edges []string
		err = t.scanPrefix(tEdgePending, "", func(_, id string) (bool, error) {
			edges = append(edges, id)
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, id := range edges {
			var e edgeRec
			if err := t.get(tEdges, id, &e, "edge"); err != nil {
				return err
			}
			if t.now.Before(e.ExpiresAt) {
				continue
			}
			if err := t.expireEdge(id); err != nil {
				return err
			}
			if st.EdgesExpired++; st.EdgesExpired >= reapBatch {
				break
			}
		}

		var grants []string
		err = t.tx.Scan(tGrantExp, nil, []byte(timeKey(t.now.Add(time.Nanosecond))), func(k, _ []byte) bool {
			grants = append(grants, string(k[8:]))
			return len(grants) < reapBatch
		})
		if err != nil {
			return err
		}
		for _, id := range grants {
			g, e, err := t.grantWithEdge(id)
			if err != nil {
				return err
			}
			if g.State != GrantActive {
				continue // listed twice (expiry and pickup deadline) in one batch
			}
			why := "expired"
			if !g.CollectBy.IsZero() && !t.now.Before(g.CollectBy) {
				why = "credential not collected within the pickup window"
			}
			if err := t.revokeGrant(g, e, systemActor, why, true); err != nil {
				return err
			}
		}
		st.GrantsExpired = len(grants)
		if st.TokensPurged, err = t.forgetTokens(reapBatch); err != nil {
			return err
		}
		if s.cfg.ArchiveTodos == nil {
			st.TodosPurged, err = s.purgeTodos(t, reapBatch, nil)
		}
		return err
	})
	if err != nil {
		return ReapStats{}, fmt.Errorf("switchboard: reap: %w", err)
	}
	if s.cfg.ArchiveTodos != nil && s.cfg.TodoRetention >= 0 {
		if st.TodosPurged, err = s.archiveTodos(ctx, reapBatch); err != nil {
			return st, fmt.Errorf("switchboard: reap: %w", err)
		}
	}
	if s.logSigner != nil {
		// A checkpoint of the log as it is before anything is purged, so
		// the stored one always covers every kept event. A problem does
		// not stop the rest: it is logged once (per distinct error),
		// readable from LogProblem and ReapStats, and counted by an
		// Observer; audit events are purged only while the log is sound.
		_, cerr := s.Checkpoint(ctx)
		if isClosed(cerr) {
			return st, fmt.Errorf("switchboard: reap: %w", inner(cerr))
		}
		if ctx.Err() != nil {
			return st, fmt.Errorf("switchboard: reap: %w", ctx.Err())
		}
		st.LogProblem = cerr
		if s.logProblem.set(cerr) {
			if cerr != nil {
				s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "switchboard: the audit log cannot be checkpointed; audit events are kept until it can",
					slog.String("error", cerr.Error()))
			} else {
				s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "switchboard: the audit log is checkpointed again")
			}
		}
		if cerr != nil && (errors.Is(cerr, ErrAuditBroken) || !errors.Is(cerr, ErrWitness) && !errors.Is(cerr, ErrWitnessForbidden)) {
			return st, nil // the checkpoint does not stand: nothing is purged
		}
	}
	if st.EventsPurged, err = s.purgeEvents(ctx, reapBatch); err != nil {
		return st, fmt.Errorf("switchboard: reap: %w", err)
	}
	return st, nil
}

// Run calls Reap every Config.ReapInterval, on Config.Clock, until ctx
// ends, and returns ctx's error. Each Reap is bounded by
// Config.ReapTimeout. When a Reap hits its batch bound it runs again at
// once. Reap errors other than a closed store are retried at the next tick
// and reported to Config.Logger; a closed store ends Run with ErrClosed.
//
// With Config.Webhooks set, Run also delivers webhooks: without it none
// is ever sent. Otherwise Run is optional: Claim recovers expired leases
// by itself, and lapsed requests and grants are refused when used; Run
// keeps queues and the approvals inbox tidy, re-delivers work without
// waiting for a claim, signs checkpoints and applies retention.
func (s *Switchboard) Run(ctx context.Context) error {
	if s.cfg.Webhooks != nil {
		dctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.deliverLoop(dctx) }()
		defer func() { stop(); <-done }()
	}
	for {
		for {
			rctx, cancel := context.WithTimeout(ctx, s.cfg.ReapTimeout)
			st, err := s.Reap(rctx)
			cancel()
			if err != nil {
				if isClosed(err) {
					return fmt.Errorf("switchboard: run: %w", inner(err))
				}
				if ctx.Err() == nil {
					s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "switchboard: reap failed; retrying at the next tick",
						slog.String("error", err.Error()), slog.Duration("retry_in", s.cfg.ReapInterval))
				}
				break
			}
			if st.LeasesExpired < reapBatch && st.EdgesExpired < reapBatch && st.GrantsExpired < reapBatch &&
				st.TokensPurged < reapBatch && st.TodosPurged < reapBatch && st.EventsPurged < reapBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.cfg.Clock.After(s.cfg.ReapInterval):
		}
	}
}
