package auditlog_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/internal/cosig"
)

func key(t *testing.T, name string) (note.Signer, note.Verifier, string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	require.NoError(t, err)
	s, err := note.NewSigner(skey)
	require.NoError(t, err)
	v, err := note.NewVerifier(vkey)
	require.NoError(t, err)
	return s, v, vkey
}

// hashes is a tree kept in memory, as tlog stores it.
type hashes map[int64]tlog.Hash

func (h hashes) ReadHashes(ix []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(ix))
	for i, x := range ix {
		v, ok := h[x]
		if !ok {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = v
	}
	return out, nil
}

func tree(t *testing.T, n int) (hashes, [][]byte) {
	t.Helper()
	h := hashes{}
	var leaves [][]byte
	for i := range n {
		leaf := []byte("entry " + strconv.Itoa(i))
		hs, err := tlog.StoredHashes(int64(i), leaf, h)
		require.NoError(t, err)
		for j, x := range hs {
			h[tlog.StoredHashIndex(0, int64(i))+int64(j)] = x
		}
		leaves = append(leaves, leaf)
	}
	return h, leaves
}

// A checkpoint signed here opens with its key, and only as what it
// states; a checkpoint signed by another key says so.
func TestCheckpointSignedAndOpened(t *testing.T) {
	signer, v, _ := key(t, "example.com/log")
	_, other, _ := key(t, "example.com/log")
	h, _ := tree(t, 5)
	root, err := auditlog.TreeHash(5, h)
	require.NoError(t, err)
	cp, err := auditlog.Sign(signer, 5, root)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(cp.Note), auditlog.Text("example.com/log", 5, root)+"\n"))

	got, sigs, err := auditlog.Open(cp.Note, v)
	require.NoError(t, err)
	assert.Equal(t, cp, got)
	require.Len(t, sigs, 1)

	_, _, err = auditlog.Open(cp.Note, other)
	assert.ErrorIs(t, err, auditlog.ErrUnknownKey)
	assert.ErrorIs(t, err, auditlog.ErrProof)
	_, sigs, err = auditlog.Open(cp.Note, other, v) // after a rotation: the old key listed
	require.NoError(t, err)
	require.Len(t, sigs, 1)
	assert.Equal(t, v.KeyHash(), sigs[0].Hash, "signed by the old key, not the first")

	_, _, err = auditlog.Open(cp.Note)
	assert.ErrorIs(t, err, auditlog.ErrProof, "no key: nothing verified")
	un, err := auditlog.Unverified(cp.Note)
	require.NoError(t, err)
	assert.Equal(t, cp.Size, un.Size)

	for name, text := range map[string]string{
		"a leading zero": "example.com/log\n05\n" + b64(root) + "\n",
		"a sign":         "example.com/log\n+5\n" + b64(root) + "\n",
		"a short root":   "example.com/log\n5\nAAAA\n",
		"a fourth line":  "example.com/log\n5\n" + b64(root) + "\nextra\n",
		"another origin": "example.com/other\n5\n" + b64(root) + "\n",
	} {
		msg, err := note.Sign(&note.Note{Text: text}, signer)
		require.NoError(t, err)
		_, _, err = auditlog.Open(msg, v)
		assert.ErrorIs(t, err, auditlog.ErrProof, name)
	}

	empty, err := auditlog.TreeHash(0, hashes{})
	require.NoError(t, err)
	assert.Equal(t, tlog.Hash(sha256.Sum256(nil)), empty)
	assert.Equal(t, auditlog.EmptyRoot, empty)
}

func b64(h tlog.Hash) string { return h.String() }

// Proofs built with tlog check against signed checkpoints, and nothing
// else does.
func TestProofs(t *testing.T) {
	signer, v, _ := key(t, "example.com/log")
	h, leaves := tree(t, 13)
	open := func(n uint64) auditlog.Checkpoint {
		root, err := auditlog.TreeHash(n, h)
		require.NoError(t, err)
		cp, err := auditlog.Sign(signer, n, root)
		require.NoError(t, err)
		cp, _, err = auditlog.Open(cp.Note, v)
		require.NoError(t, err)
		return cp
	}
	old, cur := open(8), open(13)
	for i, leaf := range leaves {
		p, err := tlog.ProveRecord(13, int64(i), h)
		require.NoError(t, err)
		ip := auditlog.InclusionProof{Index: uint64(i), TreeSize: 13, Leaf: leaf, Hashes: p}
		require.NoError(t, auditlog.CheckInclusion(cur, ip))
		ip.Leaf = []byte("forged")
		assert.ErrorIs(t, auditlog.CheckInclusion(cur, ip), auditlog.ErrProof)
	}
	p, err := tlog.ProveTree(13, 8, h)
	require.NoError(t, err)
	require.NoError(t, auditlog.CheckConsistency(old, cur, auditlog.ConsistencyProof{OldSize: 8, NewSize: 13, Hashes: p}))
	assert.ErrorIs(t, auditlog.CheckConsistency(cur, old, auditlog.ConsistencyProof{OldSize: 13, NewSize: 8, Hashes: p}), auditlog.ErrProof)
	p[0][0] ^= 1
	assert.ErrorIs(t, auditlog.CheckConsistency(old, cur, auditlog.ConsistencyProof{OldSize: 8, NewSize: 13, Hashes: p}), auditlog.ErrProof)
}

// File keeps one checkpoint, the last saved; a missing file is none.
func TestFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "checkpoint")
	f := auditlog.File(path)
	got, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Nil(t, got)
	require.NoError(t, f.Save(ctx, []byte("one")))
	require.NoError(t, f.Save(ctx, []byte("two")))
	got, err = f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, "two", string(got))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	got, err = f.Load(ctx)
	require.NoError(t, err)
	assert.Nil(t, got, "an empty file is none (the command line's opt-in)")
}

// Cosigners counts each witness once, and only valid cosignatures.
func TestCosigners(t *testing.T) {
	signer, _, _ := key(t, "example.com/log")
	cp, err := auditlog.Sign(signer, 0, auditlog.EmptyRoot)
	require.NoError(t, err)
	var keys []string
	signed := cp.Note
	for _, name := range []string{"w1.example", "w2.example", "w3.example"} {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		w, err := cosig.NewSigner(name, priv, func() uint64 { return 1_800_000_000 })
		require.NoError(t, err)
		keys = append(keys, w.VerifierKey())
		if name != "w3.example" {
			signed = append(signed, w.Cosign([]byte(auditlog.Text(cp.Origin, cp.Size, cp.Root)))...)
		}
	}
	names, err := auditlog.Cosigners(signed, keys, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"w1.example", "w2.example"}, names)
	// A broken line of w3's, before or after the good ones, spoils
	// nothing: it does not count.
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	w3, err := cosig.NewSigner("w3.example", priv, func() uint64 { return 1_800_000_000 })
	require.NoError(t, err)
	line := w3.Cosign([]byte(auditlog.Text(cp.Origin, cp.Size, cp.Root)))
	// Flip the last character of the signature for another base64 one:
	// a well-formed line whose signature does not verify.
	bad := []byte(line)
	i := len(bad) - 6 // before any padding and the newline
	bad[i] = map[bool]byte{true: 'B', false: 'A'}[bad[i] == 'A']
	head, sigs, _ := strings.Cut(string(signed), "\n\n")
	for _, withBad := range []string{string(signed) + string(bad), head + "\n\n" + string(bad) + sigs} {
		names, err = auditlog.Cosigners([]byte(withBad), append(keys[:2:2], w3.VerifierKey()), 2)
		require.NoError(t, err)
		assert.Equal(t, []string{"w1.example", "w2.example"}, names)
	}
	_, err = auditlog.Cosigners(signed, append(keys, keys[0]), 3)
	assert.ErrorIs(t, err, auditlog.ErrProof, "a witness listed twice counts once")
	_, err = auditlog.Cosigners(signed, keys, 4)
	assert.ErrorIs(t, err, auditlog.ErrQuorum)
	_, err = auditlog.Cosigners(signed, []string{"not a key"}, 1)
	assert.ErrorIs(t, err, auditlog.ErrQuorum)
}

// The log's package knows nothing of friends or todos: it imports nothing
// of package switchboard's, and neither does package witness.
func TestImportsNothingOfTheRoot(t *testing.T) {
	allowed := map[string]bool{
		"github.com/switchboardhq/switchboard/auditlog":       true,
		"github.com/switchboardhq/switchboard/internal/cosig": true,
		"github.com/switchboardhq/switchboard/store":          true,
	}
	for _, dir := range []string{".", "../witness"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, im := range af.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				if strings.HasPrefix(p, "github.com/switchboardhq/") {
					assert.True(t, allowed[p], "%s imports %s", f, p)
				}
			}
		}
	}
}

// A rotation keeps the log's name: the old public key checks the old
// checkpoints, and a key of another name is refused.
func TestKeys(t *testing.T) {
	_, _, err := auditlog.NewKey("has space")
	require.ErrorIs(t, err, auditlog.ErrKey)
	oldS, oldV, err := auditlog.NewKey("example.com/log")
	require.NoError(t, err)
	newS, _, err := auditlog.NewKey("example.com/log")
	require.NoError(t, err)
	_, otherV, err := auditlog.NewKey("example.com/other")
	require.NoError(t, err)

	old, err := auditlog.ParseKeys(oldS)
	require.NoError(t, err)
	assert.Equal(t, oldV, old.VerifierKey)
	cp, err := auditlog.Sign(old.Signer, 0, auditlog.EmptyRoot)
	require.NoError(t, err)

	rotated, err := auditlog.ParseKeys(newS, oldV)
	require.NoError(t, err)
	require.Len(t, rotated.Verifiers, 2)
	_, _, err = auditlog.Open(cp.Note, rotated.Verifiers...)
	require.NoError(t, err, "the old checkpoint checks with the old key listed")
	_, _, err = auditlog.Open(cp.Note, rotated.Verifiers[0])
	require.ErrorIs(t, err, auditlog.ErrUnknownKey)

	_, err = auditlog.ParseKeys(newS, otherV)
	require.ErrorIs(t, err, auditlog.ErrKey, "a previous key of another log")
	_, err = auditlog.ParseKeys(newS, rotated.VerifierKey)
	require.ErrorIs(t, err, auditlog.ErrKey, "the signing key's own, as a previous one")
	_, err = auditlog.ParseKeys(newS, oldV, oldV)
	require.ErrorIs(t, err, auditlog.ErrKey, "a previous key twice")
	_, _, err = auditlog.Open(cp.Note, old.Verifiers[0], old.Verifiers[0])
	require.NoError(t, err, "a key given twice to Open is one key")
	_, err = auditlog.ParseKeys(oldV)
	require.ErrorIs(t, err, auditlog.ErrKey, "a public key is no signer")
}

// The mark rises only to larger trees, stays for good once forked, and
// ages out with retention unless forked.
func TestMark(t *testing.T) {
	var m auditlog.Mark
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	assert.Nil(t, m.Get(now, time.Hour))
	r1, r2 := tlog.Hash{1}, tlog.Hash{2}
	m.Note(5, r1, now)
	m.Note(3, r2, now)
	assert.Equal(t, &auditlog.Checkpoint{Size: 5, Root: r1}, m.Get(now, time.Hour))
	m.Note(5, r2, now) // another root at the same size: not a renewal
	assert.Equal(t, r1, m.Get(now, time.Hour).Root)
	assert.Nil(t, m.Get(now.Add(55*time.Minute), time.Hour), "aged out near the retention")
	m.Note(7, r2, now)
	m.Fork()
	m.Note(9, r1, now)
	assert.Equal(t, &auditlog.Checkpoint{Size: 7, Root: r2}, m.Get(now.Add(24*time.Hour), time.Hour), "a forked mark stays")
	assert.True(t, auditlog.Fresh(now, now.Add(1000*time.Hour), -1))
}

// Extends holds a tree to every prefix it proves, and to nothing else.
func TestExtends(t *testing.T) {
	h, _ := tree(t, 13)
	root, err := auditlog.TreeHash(13, h)
	require.NoError(t, err)
	for n := uint64(0); n <= 13; n++ {
		r, err := auditlog.TreeHash(n, h)
		require.NoError(t, err)
		ok, err := auditlog.Extends(h, 13, root, auditlog.Checkpoint{Size: n, Root: r})
		require.NoError(t, err)
		assert.True(t, ok, "prefix %d", n)
		ok, err = auditlog.Extends(h, 13, root, auditlog.Checkpoint{Size: n, Root: tlog.Hash{9}})
		require.NoError(t, err)
		assert.False(t, ok, "prefix %d with another root", n)
	}
	ok, err := auditlog.Extends(h, 13, root, auditlog.Checkpoint{Size: 14, Root: root})
	require.NoError(t, err)
	assert.False(t, ok, "a larger tree")
	gone := goneReader{}
	ok, err = auditlog.Extends(gone, 13, root, auditlog.Checkpoint{Size: 4, Root: tlog.Hash{}})
	require.NoError(t, err)
	assert.False(t, ok, "hashes purged: not held")
}

type goneReader struct{}

func (goneReader) ReadHashes([]int64) ([]tlog.Hash, error) {
	return nil, fmt.Errorf("read: %w", auditlog.ErrHashGone)
}
