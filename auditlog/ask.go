// Asking witnesses: each checkpoint sent to every witness at once, with
// a proof from the size it last cosigned, one request at a time per
// witness, its answer checked against its key.

package auditlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/internal/cosig"
	"github.com/switchboardhq/switchboard/store"
)

// WitnessConfig is one witness a log asks to cosign its checkpoints.
type WitnessConfig struct {
	// Witness is how to ask it: package witness's Client ({URL: its
	// add-checkpoint endpoint}) over HTTP, or its Server in this process.
	Witness Witness
	// Key is the witness's public key in signed-note form
	// (name+hash+base64 of 0x04 and the Ed25519 key, C2SP
	// tlog-cosignature): a cosignature that does not verify with it is
	// not kept, and other lines of the witness's answer are ignored.
	Key string
	// Timeout bounds each call to the witness, and the wait for the one
	// under way to end (one request at a time per witness; Ask asks every
	// witness at once, so a witness that never answers costs one Timeout
	// per checkpoint and holds nothing else up). The proofs the calls
	// carry are read within Ask's context, not this. 0 means 10 seconds.
	Timeout time.Duration
}

// DefaultWitnessTimeout is WitnessConfig.Timeout's default.
const DefaultWitnessTimeout = 10 * time.Second

// ErrWitnessConfig is wrapped by NewWitnesses's errors.
var ErrWitnessConfig = errors.New("invalid witness configuration")

// Witnesses are the witnesses a log asks to cosign its checkpoints
// (C2SP tlog-witness), each by its name (its key's).
type Witnesses struct {
	list []witnessConn
}

type witnessConn struct {
	cfg WitnessConfig
	v   *cosig.Verifier
	sem chan struct{} // one request at a time per witness
}

// NewWitnesses checks cs — a Witness and a Key each, no Timeout below 0,
// no two of one name — and returns them ready to ask. Its errors name the
// witness by its index in cs ("[2].Key: …") and wrap ErrWitnessConfig.
func NewWitnesses(cs []WitnessConfig) (*Witnesses, error) {
	w := &Witnesses{list: make([]witnessConn, len(cs))}
	names := map[string]bool{}
	for i, c := range cs {
		if c.Witness == nil {
			return nil, fmt.Errorf("%w: [%d]: no Witness", ErrWitnessConfig, i)
		}
		if c.Timeout < 0 {
			return nil, fmt.Errorf("%w: [%d].Timeout is negative", ErrWitnessConfig, i)
		}
		if c.Timeout == 0 {
			c.Timeout = DefaultWitnessTimeout
		}
		v, err := cosig.NewVerifier(c.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: [%d].Key: %v", ErrWitnessConfig, i, err)
		}
		if names[v.Name()] {
			return nil, fmt.Errorf("%w: [%d]: a second witness named %q", ErrWitnessConfig, i, v.Name())
		}
		names[v.Name()] = true
		w.list[i] = witnessConn{cfg: c, v: v, sem: make(chan struct{}, 1)}
	}
	return w, nil
}

// Len is how many witnesses there are (0 for nil).
func (w *Witnesses) Len() int {
	if w == nil {
		return 0
	}
	return len(w.list)
}

// Names are the witnesses' names, in the order they were given.
func (w *Witnesses) Names() []string {
	out := make([]string, w.Len())
	for i := range out {
		out[i] = w.list[i].v.Name()
	}
	return out
}

// Cosignature is what one witness answered: its name and its
// cosignature lines of the checkpoint, each verified with its key.
type Cosignature struct {
	Name  string
	Lines [][]byte
}

// Prover is what asking needs of the log: its size now, and a
// consistency proof between two of its sizes (tlog.ProveTree's hashes),
// an error wrapping ErrHashGone if retention purged what it needs.
type Prover interface {
	Size(ctx context.Context) (uint64, error)
	ProveTree(ctx context.Context, oldSize, newSize uint64) ([]tlog.Hash, error)
}

// ErrWitnessAhead is Ask's when a witness has cosigned a larger tree than
// the checkpoint it is asked about, and the log holds that tree: another
// signer got there first, and the checkpoint is to be signed again.
var ErrWitnessAhead = errors.New("a witness has cosigned a newer checkpoint of this log")

// Ask has each witness that has not cosigned cp yet cosign it, all at
// once, each from the size olds gives for it (the last it cosigned, as
// its user recorded; 0 for none). logNote is cp's note as the log signed
// it, without cosignatures. A witness that refuses — the log is not
// consistent with what it saw — is an *AuditError wrapping
// ErrWitnessRefused, returned alone, as is ErrWitnessAhead; the others'
// troubles are joined, each wrapping ErrWitness or ErrWitnessForbidden
// and naming the witness, beside the cosignatures of those that answered.
func (w *Witnesses) Ask(ctx context.Context, cp Checkpoint, logNote []byte, olds []uint64, p Prover) ([]Cosignature, error) {
	text, _, _ := strings.Cut(string(logNote), "\n\n")
	text += "\n"
	type answer struct {
		c   Cosignature
		err error
	}
	answers := make([]answer, w.Len())
	var wg sync.WaitGroup
	for i := range w.Len() {
		c := &w.list[i]
		if has, err := HasCosignature(cp.Note, c.v); err != nil || has {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := c.ask(ctx, cp, logNote, olds[i], p)
			if err != nil {
				answers[i].err = err
				return
			}
			lines, err := witnessLines(body, text, c.v)
			if err != nil {
				answers[i].err = fmt.Errorf("%w: %s: %v", ErrWitness, c.v.Name(), err)
				return
			}
			answers[i].c = Cosignature{Name: c.v.Name(), Lines: lines}
		}()
	}
	wg.Wait()
	var out []Cosignature
	var problems []error
	for i, a := range answers {
		switch {
		case errors.Is(a.err, ErrAuditBroken), errors.Is(a.err, ErrWitnessAhead):
			return nil, a.err
		case errors.Is(a.err, ErrWitnessForbidden) || errors.Is(a.err, ErrWitness):
			problems = append(problems, a.err)
		case a.err != nil:
			problems = append(problems, fmt.Errorf("%w: %s: %w", ErrWitness, w.list[i].v.Name(), unprefixedErr{a.err}))
		case a.c.Name != "":
			out = append(out, a.c)
		}
	}
	return out, errors.Join(problems...)
}

// witnessLines returns the lines of a witness's answer that are its
// cosignatures of text (C2SP tlog-witness: one or more signature lines;
// lines of other keys are ignored). None is an error.
func witnessLines(body []byte, text string, v *cosig.Verifier) ([][]byte, error) {
	var lines [][]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i+1], body[i+1:]
		} else {
			body = nil
		}
		sig, err := parseSigLine(line)
		if err != nil {
			return nil, errors.New("its answer is not signature lines")
		}
		if sig.Name != v.Name() || sig.Hash != v.KeyHash() {
			continue
		}
		if _, err := note.Open(append([]byte(text+"\n"), line...), note.VerifierList(v)); err != nil {
			return nil, fmt.Errorf("its cosignature does not verify: %v", err)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return nil, errors.New("its answer holds no cosignature of its key")
	}
	return lines, nil
}

// ask sends cp to the witness with a proof from old, the size it last
// cosigned as recorded, and once more from the size it says it has if
// that differs — one request at a time per witness. The witness's Timeout
// bounds the wait for the request before and each call to it; the proofs
// are the log's work, bounded by ctx alone (a slow store is not a witness
// that does not answer).
func (c *witnessConn) ask(ctx context.Context, cp Checkpoint, logNote []byte, old uint64, p Prover) ([]byte, error) {
	name := c.v.Name()
	wait, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	select {
	case c.sem <- struct{}{}:
		cancel()
		defer func() { <-c.sem }()
	case <-wait.Done():
		cancel()
		return nil, fmt.Errorf("%w: %s: another request to it is under way: %w", ErrWitness, name, wait.Err())
	}
	for try := 0; ; try++ {
		if old > cp.Size {
			// The witness has cosigned a larger tree. Another signer's
			// (a concurrent signer, another process) if the log holds
			// it: this checkpoint is merely behind, and is signed again.
			// A log shorter than what a witness cosigned was rolled back.
			size, err := p.Size(ctx)
			if err != nil {
				return nil, err
			}
			if size >= old {
				return nil, ErrWitnessAhead
			}
			return nil, &AuditError{Seq: size + 1, Err: ErrWitnessRefused, Reason: fmt.Sprintf("witness %s has cosigned a checkpoint of %d events for this log, which now holds %d: the log was rolled back", name, old, size)}
		}
		var proof []tlog.Hash
		if old > 0 && old < cp.Size {
			hs, err := p.ProveTree(ctx, old, cp.Size)
			if errors.Is(err, ErrHashGone) {
				return nil, &AuditError{Seq: old + 1, Err: ErrWitnessRefused, Reason: fmt.Sprintf("witness %s last cosigned a checkpoint of %d events, and the log can no longer prove the one of %d extends it: retention purged past it, which it does only while a witness is out of Config.Witnesses (put back after that, its operator must reset what it holds for this log) — else the store was written", name, old, cp.Size)}
			}
			if err != nil {
				return nil, err
			}
			proof = hs
		}
		call, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		body, err := c.cfg.Witness.AddCheckpoint(call, old, proof, logNote)
		cancel()
		var conflict *WitnessConflict
		switch {
		case err == nil:
			return body, nil
		case errors.As(err, &conflict) && (conflict.Fork || conflict.Size == old):
			return nil, &AuditError{Seq: 1, Err: ErrWitnessRefused, Reason: fmt.Sprintf("witness %s refused the checkpoint of %d events: it cosigned another root for the log of %d events: a fork", name, cp.Size, conflict.Size)}
		case errors.As(err, &conflict) && try == 0:
			old = conflict.Size
		case errors.As(err, &conflict):
			return nil, fmt.Errorf("%w: %s: its size changed again, to %d", ErrWitness, name, conflict.Size)
		case errors.Is(err, ErrWitnessRefused):
			return nil, &AuditError{Seq: min(old, cp.Size) + 1, Err: ErrWitnessRefused, Reason: fmt.Sprintf("witness %s refused the checkpoint of %d events as not extending the one of %d it cosigned: %v", name, cp.Size, old, unprefixed(err))}
		case errors.Is(err, ErrWitnessForbidden):
			return nil, fmt.Errorf("witness %s: %w", name, unprefixedErr{err})
		default:
			return nil, err
		}
	}
}

// unprefixed is err's text without a "switchboard: " its sender put
// first: it is quoted inside an error that carries its own.
func unprefixed(err error) string { return strings.TrimPrefix(err.Error(), "switchboard: ") }

// unprefixedErr is err, read as unprefixed, still matching what it wraps.
type unprefixedErr struct{ err error }

func (e unprefixedErr) Error() string { return unprefixed(e.err) }
func (e unprefixedErr) Unwrap() error { return e.err }

// parseSigLine reads one signed-note signature line.
func parseSigLine(line []byte) (note.Signature, error) {
	s, ok := strings.CutPrefix(string(line), "— ")
	s, nl := strings.CutSuffix(s, "\n")
	name, b64, sp := strings.Cut(s, " ")
	if !ok || !nl || !sp || strings.ContainsAny(b64, " \n") {
		return note.Signature{}, errors.New("not one signature line")
	}
	_, err := note.Open([]byte("x\n\n— "+name+" "+b64+"\n"), note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) || len(unverified.Note.UnverifiedSigs) != 1 {
		return note.Signature{}, errors.New("not one signature line")
	}
	return unverified.Note.UnverifiedSigs[0], nil
}

// witnessKey is the Layout.Meta key of the size a witness last cosigned.
func witnessKey(name string) []byte { return []byte("witness\x00" + name) }

// WitnessSizes reads the size each of w last cosigned, as recorded with
// RecordCosigned (0: none recorded).
func (x *Tx) WitnessSizes(w *Witnesses) ([]uint64, error) {
	out := make([]uint64, w.Len())
	for i := range out {
		name := w.list[i].v.Name()
		b, err := x.tx.Get(x.layout.Meta, witnessKey(name))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(b) != 8 {
			return nil, fmt.Errorf("witness %s: stored size is %d bytes", name, len(b))
		}
		out[i] = keySeq(b)
	}
	return out, nil
}

// RecordCosigned records that witness name cosigned a checkpoint of size
// entries: the size the next proof to it starts from.
func (x *Tx) RecordCosigned(name string, size uint64) error {
	return x.tx.Put(x.layout.Meta, witnessKey(name), be64(size))
}
