// Command switchboard looks inside a switchboard store without writing Go:
// queue counts, todos, dead-letter redrive, a human's connections, the
// audit log (verify, checkpoint, proofs) and backups — on a bolt file or a
// PostgreSQL database.
//
//	switchboard --db switchboard.db queues
//	switchboard --dsn postgres://… todos bob-desk/inbox --state dead
//	switchboard --db switchboard.db redrive bob-desk/inbox
//	switchboard --db switchboard.db audit verify
//
// Human-readable tables by default, --json for scripts. Exit status: 0 ok,
// 1 an error, 2 bad usage, 3 the audit log does not verify, 4 a change
// (redrive, upgrade-records) to a bolt file another process holds. A bolt file a running host
// holds is read through a consistent snapshot taken without any lock
// (bolt.Snapshot), so the host is neither blocked nor touched.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	bbolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/term"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/postgres"
)

// Exit statuses.
const (
	exitError  = 1
	exitUsage  = 2
	exitAudit  = 3
	exitLocked = 4
)

// exitErr carries an exit status.
type exitErr struct {
	code int
	err  error
}

func (e *exitErr) Error() string { return e.err.Error() }
func (e *exitErr) Unwrap() error { return e.err }

// app is the open store and the output settings.
type app struct {
	db, dsn, table, logKey string
	previousKeys           []string // --previous-log-key: verifier keys of keys that signed before
	verifierKeys           []string // --verifier-key: keys the stored checkpoint must verify with
	asJSON                 bool
	out                    io.Writer

	st  store.Store
	sb  *switchboard.Switchboard
	blt *bolt.Store
	// snapshot is the temporary directory of a snapshot of a bolt file
	// another process holds ("" when the file itself is open).
	snapshot string
	// keptBefore is the checkpoint kept beside the log key, read before
	// the snapshot was taken (nil: none, or no snapshot).
	keptBefore []byte
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	a := &app{out: stdout}
	root := a.commands()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if a.sb != nil {
		_ = a.sb.Close()
	}
	if a.st != nil {
		_ = a.st.Close()
	}
	if a.snapshot != "" {
		_ = os.RemoveAll(a.snapshot)
	}
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, errorLine(err))
	var e *exitErr
	if errors.As(err, &e) {
		return e.code
	}
	if strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "flag") || strings.Contains(err.Error(), "arg(s)") {
		return exitUsage
	}
	return exitError
}

func (a *app) commands() *cobra.Command {
	root := &cobra.Command{
		Use:           "switchboard",
		Short:         "Look inside a switchboard store: queues, todos, connections, the audit log, backups",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.db, "db", "", "a bolt store file (a live host's is read through a snapshot)")
	root.PersistentFlags().StringVar(&a.dsn, "dsn", "", "a PostgreSQL DSN")
	root.PersistentFlags().StringVar(&a.table, "table", "", "the PostgreSQL store's table (default the store's)")
	root.PersistentFlags().StringVar(&a.logKey, "log-key", "", "a file with the audit log's signing key (for checkpoint); the checkpoint kept beside it (FILE.checkpoint, as examples/host keeps it) is checked too")
	root.PersistentFlags().StringArrayVar(&a.previousKeys, "previous-log-key", nil, "the public key of a key that signed this log's checkpoints before --log-key (after a rotation); repeat for more")
	root.PersistentFlags().StringArrayVar(&a.verifierKeys, "verifier-key", nil, "a public key of the log (LogVerifierKey): audit verify checks the stored checkpoint is signed with one of them, without the signing key; repeat for old keys")
	root.PersistentFlags().BoolVar(&a.asJSON, "json", false, "JSON output, for scripts")

	queues := &cobra.Command{Use: "queues", Short: "Every queue's todo counts by state", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			qs, err := a.sb.InspectQueues(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(qs, []string{"QUEUE", "READY", "DELAYED", "LEASED", "DONE", "DEAD", "CANCELLED"}, func(row func(...any)) {
				for _, q := range qs {
					row(q.Queue, q.Ready, q.Delayed, q.Leased, q.Done, q.Dead, q.Cancelled)
				}
			})
		}}

	var state string
	var limit int
	todos := &cobra.Command{Use: "todos QUEUE", Short: "A queue's todos in creation order (QUEUE is persona/queue)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			ts, err := a.sb.InspectTodos(cmd.Context(), args[0], &switchboard.ListOptions{State: switchboard.TodoState(state), Limit: limit})
			if err != nil {
				return err
			}
			return a.print(ts, []string{"ID", "STATE", "ATTEMPTS", "KIND", "TITLE", "CREATED", "ERROR"}, func(row func(...any)) {
				for _, t := range ts {
					row(t.ID, t.State, fmt.Sprintf("%d/%d", t.Attempts, t.MaxAttempts), t.Kind, clip(t.Title, 40), t.CreatedAt.Format(time.RFC3339), clip(t.Error, 60))
				}
			})
		}}
	todos.Flags().StringVar(&state, "state", "", "only todos in this state (queued, leased, done, dead, cancelled)")
	todos.Flags().IntVar(&limit, "limit", 100, "at most this many")

	show := &cobra.Command{Use: "show TODO", Short: "One todo, with its attempts", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			t, err := a.sb.InspectTodo(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.asJSON {
				return a.json(t)
			}
			w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			for _, kv := range [][2]string{{"id", t.ID}, {"queue", t.Queue}, {"kind", t.Kind}, {"title", t.Title}, {"state", string(t.State)},
				{"attempts", fmt.Sprintf("%d/%d", t.Attempts, t.MaxAttempts)}, {"created by", t.Origin.Agent + " (grant " + t.Origin.Grant + ")"},
				{"created", t.CreatedAt.Format(time.RFC3339)}, {"error", t.Error}} {
				fmt.Fprintf(w, "%s\t%s\n", kv[0], kv[1])
			}
			for _, h := range t.History {
				fmt.Fprintf(w, "attempt %d\t%s by %s, %s %s\n", h.N, h.ClaimedAt.Format(time.RFC3339), h.Agent, h.Outcome, h.Reason)
			}
			return w.Flush()
		}}

	redrive := &cobra.Command{Use: "redrive QUEUE [TODO...]", Short: "Re-queue dead todos: those named, or every dead one of the queue", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			if a.snapshot != "" {
				return &exitErr{exitLocked, fmt.Errorf("%s is held by another process: redrive changes the store, so it needs the file itself (stop the host, or redrive through it)", a.db)}
			}
			n, err := a.sb.RedriveDead(cmd.Context(), args[0], args[1:]...)
			if err != nil {
				return err
			}
			if a.asJSON {
				return a.json(map[string]int{"redriven": n})
			}
			fmt.Fprintf(a.out, "%d dead todo(s) re-queued in %s\n", n, args[0])
			return nil
		}}

	upgrade := &cobra.Command{Use: "upgrade-records", Short: "Move the store to layout 9 (checksummed todo records, audit events several to a record; run once every process sharing it runs this release)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			if a.snapshot != "" {
				return &exitErr{exitLocked, fmt.Errorf("%s is held by another process: upgrade-records changes the store, so it needs the file itself (stop the host, or call UpgradeRecords in it)", a.db)}
			}
			if err := a.sb.UpgradeRecords(cmd.Context()); err != nil {
				return err
			}
			if a.asJSON {
				return a.json(map[string]int{"layout": 9})
			}
			fmt.Fprintln(a.out, "the store is at layout 9: todo records are written checksummed, audit events several to a record; a previous release now refuses it")
			return nil
		}}

	var issuer, subject string
	conns := &cobra.Command{Use: "connections", Short: "A human's live grants, both ways", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if issuer == "" || subject == "" {
				return &exitErr{exitUsage, errors.New("connections needs --issuer and --subject")}
			}
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			cs, err := a.sb.Connections(cmd.Context(), switchboard.Human{Issuer: issuer, Subject: subject})
			if err != nil {
				return err
			}
			return a.print(cs, []string{"GRANT", "DIRECTION", "HOLDER", "TARGET", "SCOPE", "SINCE", "LAST USED"}, func(row func(...any)) {
				for _, c := range cs {
					last := "never"
					if !c.LastUsed.IsZero() {
						last = c.LastUsed.Format(time.RFC3339)
					}
					row(c.Grant.ID, c.Direction, c.Grant.Holder, c.Grant.Target, strings.Join(c.Grant.Scope.Describe(), "; "), c.Grant.CreatedAt.Format(time.RFC3339), last)
				}
			})
		}}
	conns.Flags().StringVar(&issuer, "issuer", "", "the human's issuer")
	conns.Flags().StringVar(&subject, "subject", "", "the human's subject")

	audit := &cobra.Command{Use: "audit", Short: "The audit log: verify, checkpoint, prove"}
	var progress bool
	verify := &cobra.Command{Use: "verify", Short: "Rebuild the Merkle tree from every kept event and check it (exit 3 if it does not verify)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			opts := switchboard.VerifyOptions{}
			if progress {
				bar := &progressBar{w: cmd.ErrOrStderr()}
				opts.Progress = bar.show
				defer bar.done()
			} else {
				fmt.Fprintln(cmd.ErrOrStderr(), "verifying the audit log…")
			}
			rep, err := a.sb.VerifyAuditWith(cmd.Context(), opts)
			if err == nil && a.logKey != "" {
				err = a.sb.CheckLog(cmd.Context())
			}
			if err == nil && len(a.verifierKeys) > 0 {
				if rep.Checkpoint == nil {
					err = fmt.Errorf("%w: no stored checkpoint to check with --verifier-key", switchboard.ErrAuditBroken)
				} else if _, oerr := switchboard.OpenCheckpoint(rep.Checkpoint.Note, a.verifierKeys[0], a.verifierKeys[1:]...); oerr != nil {
					err = fmt.Errorf("%w: the stored checkpoint: %w", switchboard.ErrAuditBroken, oerr)
				}
			}
			if err != nil {
				return &exitErr{exitAudit, err}
			}
			if a.asJSON {
				return a.json(rep)
			}
			fmt.Fprintf(a.out, "ok: events %d–%d, tree size %d, root %s\n", rep.First, rep.Last, rep.TreeSize, rep.Root)
			return nil
		}}
	verify.Flags().BoolVar(&progress, "progress", term.IsTerminal(int(os.Stderr.Fd())), "draw a progress bar on stderr (default: when stderr is a terminal)")
	audit.AddCommand(verify)
	audit.AddCommand(&cobra.Command{Use: "checkpoint", Short: "Sign and print the log's latest checkpoint (needs --log-key; on a running host's file, of a snapshot, kept nowhere)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			cp, err := a.sb.Checkpoint(cmd.Context())
			if errors.Is(err, switchboard.ErrAuditBroken) {
				return &exitErr{exitAudit, err}
			}
			if err != nil {
				return err
			}
			if a.snapshot != "" {
				fmt.Fprintln(os.Stderr, "switchboard: a checkpoint of the snapshot: stored in the snapshot only, and not kept beside the log key (the running host signs and keeps its own)")
			}
			if a.asJSON {
				return a.json(cp)
			}
			_, err = a.out.Write(cp.Note)
			return err
		}})
	audit.AddCommand(&cobra.Command{Use: "prove SEQ", Short: "An inclusion proof of one event in the current tree", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil {
				return &exitErr{exitUsage, fmt.Errorf("SEQ %q is not an event number", args[0])}
			}
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			p, err := a.sb.ProveEvent(cmd.Context(), seq, 0)
			if err != nil {
				return err
			}
			return a.json(p)
		}})

	backup := &cobra.Command{Use: "backup FILE", Short: "Write a consistent copy of a bolt store to FILE (a plain bbolt file)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.open(cmd.Context()); err != nil {
				return err
			}
			if a.blt == nil {
				return &exitErr{exitUsage, errors.New("backup is for a bolt store (--db); back PostgreSQL up with its own tools")}
			}
			f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			n, err := a.blt.WriteTo(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(args[0])
				return err
			}
			fmt.Fprintf(a.out, "wrote %d bytes to %s\n", n, args[0])
			return nil
		}}

	root.AddCommand(queues, todos, show, redrive, conns, audit, backup, upgrade)
	return root
}

// open opens the store named by --db or --dsn, and a Switchboard on it.
func (a *app) open(ctx context.Context) error {
	if (a.db == "") == (a.dsn == "") {
		return &exitErr{exitUsage, errors.New("name one store: --db FILE or --dsn DSN")}
	}
	if a.db != "" {
		if _, err := os.Stat(a.db); err != nil {
			return err
		}
		st, err := bolt.Open(a.db, &bolt.Options{Timeout: time.Second})
		if errors.Is(err, bbolterrors.ErrTimeout) {
			// Held by a running host: read a consistent snapshot, taken
			// without any lock, so the host is neither blocked nor touched.
			// The checkpoint the host keeps beside its log key is read
			// first: the host may sign and keep a newer one while the
			// snapshot is taken, and the snapshot must not look shorter
			// than what it is checked against.
			if a.logKey != "" {
				if b, err := os.ReadFile(a.logKey + ".checkpoint"); err == nil {
					a.keptBefore = b
				} else if !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			if st, err = a.openSnapshot(); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		a.st, a.blt = st, st
	} else {
		st, err := postgres.Open(ctx, a.dsn, &postgres.Options{Table: a.table})
		if err != nil {
			return err
		}
		a.st = st
	}
	cfg := &switchboard.Config{}
	if a.logKey != "" {
		b, err := os.ReadFile(a.logKey)
		if err != nil {
			return err
		}
		cfg.LogKey = strings.TrimSpace(string(b))
		cfg.PreviousLogKeys = a.previousKeys
		if a.snapshot != "" {
			// A snapshot of a live host's store: the checkpoint the host
			// kept before it was taken is checked against, never written —
			// it is the host's own, and a checkpoint of the snapshot is
			// stored only in the snapshot.
			if a.keptBefore != nil {
				cfg.Checkpoints = frozenCheckpoint(a.keptBefore)
			}
		} else if _, err := os.Stat(a.logKey + ".checkpoint"); err == nil {
			cfg.Checkpoints = switchboard.CheckpointFile(a.logKey + ".checkpoint")
		}
	}
	sb, err := switchboard.New(a.st, cfg)
	if err != nil {
		return err
	}
	a.sb = sb
	return nil
}

// frozenCheckpoint is a CheckpointStore holding the checkpoint read before
// a snapshot was taken: read, never written.
type frozenCheckpoint []byte

func (f frozenCheckpoint) Load(context.Context) ([]byte, error) { return f, nil }
func (frozenCheckpoint) Save(context.Context, []byte) error     { return nil }

// openSnapshot snapshots the held bolt file into a temporary directory
// (bolt.Snapshot) and opens the copy.
func (a *app) openSnapshot() (*bolt.Store, error) {
	dir, err := os.MkdirTemp("", "switchboard-snapshot")
	if err != nil {
		return nil, err
	}
	a.snapshot = dir
	copyPath := filepath.Join(dir, "snapshot.db")
	if err := bolt.Snapshot(a.db, copyPath); err != nil {
		return nil, &exitErr{exitLocked, fmt.Errorf("%s is held by another process, and a snapshot of it failed: %w", a.db, err)}
	}
	fmt.Fprintf(os.Stderr, "switchboard: %s is held by another process; reading a snapshot of it\n", a.db)
	return bolt.Open(copyPath, nil)
}

// print writes v as JSON with --json, else a table.
func (a *app) print(v any, header []string, rows func(row func(...any))) error {
	if a.asJSON {
		return a.json(v)
	}
	w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	rows(func(cells ...any) {
		s := make([]string, len(cells))
		for i, c := range cells {
			s[i] = fmt.Sprint(c)
		}
		fmt.Fprintln(w, strings.Join(s, "\t"))
	})
	return w.Flush()
}

func (a *app) json(v any) error {
	e := json.NewEncoder(a.out)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// progressBar draws VerifyAudit's progress on one line of a terminal, at
// most ten times a second.
type progressBar struct {
	w     io.Writer
	last  time.Time
	drawn bool
}

func (b *progressBar) show(checked, total uint64) {
	if checked < total && time.Since(b.last) < 100*time.Millisecond {
		return
	}
	b.last = time.Now()
	const width = 30
	filled, pct := width, 100.0
	if total > 0 {
		filled, pct = int(checked*width/total), float64(checked)*100/float64(total)
	}
	fmt.Fprintf(b.w, "\rverifying [%s%s] %5.1f%% %d/%d events", strings.Repeat("=", filled), strings.Repeat(" ", width-filled), pct, checked, total)
	b.drawn = true
}

func (b *progressBar) done() {
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}

// errorLine is how the command line reports err: as the library words it,
// "switchboard: " once and then the verb; an error of the command line's
// own (a flag, a file) gets the prefix it lacks.
func errorLine(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "switchboard: ") {
		return msg
	}
	return "switchboard: " + msg
}
