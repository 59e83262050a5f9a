package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A repository of its own, with a go test benchmark and an examples/bench
// that prints a table the way the real one does, at two commits.
func fixtureRepo(t *testing.T) (dir, first string) {
	t.Helper()
	dir = t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	gitDo := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	write("go.mod", "module example.com/fixture\n\ngo 1.26\n")
	write("sum.go", "package fixture\n\n// Sum adds xs.\nfunc Sum(xs []int) (n int) {\n\tfor _, x := range xs {\n\t\tn += x\n\t}\n\treturn n\n}\n")
	write("sum_test.go", "package fixture\n\nimport \"testing\"\n\nfunc BenchmarkSum(b *testing.B) {\n\txs := make([]int, 1000)\n\tfor b.Loop() {\n\t\tSum(xs)\n\t}\n}\n")
	write("examples/bench/main.go", `package main

import (
	"flag"
	"fmt"
)

func main() {
	only := flag.String("only", "", "")
	flag.Duration("d", 0, "")
	flag.Parse()
	fmt.Println("| figure | value | baseline (same run) | ratio | target |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Println("| raw bbolt: DB.Batch, 16 writers | 1500 puts/s |  |  | baseline |")
	fmt.Printf("| lifecycle, 16 workers (%s) | 9000 todos/s | DB.Batch@16 1500 todos/s | 6.00× | ≥ 6× |\n", *only)
}
`)
	gitDo("init", "-q")
	gitDo("add", ".")
	gitDo("commit", "-q", "-m", "one")
	first = gitDo("rev-parse", "HEAD")
	write("sum.go", "package fixture\n\n// Sum adds xs, twice over.\nfunc Sum(xs []int) (n int) {\n\tfor range 2 {\n\t\tfor _, x := range xs {\n\t\t\tn += x\n\t\t}\n\t}\n\treturn n / 2\n}\n")
	bench, err := os.ReadFile(filepath.Join(dir, "examples/bench/main.go"))
	require.NoError(t, err)
	write("examples/bench/main.go", strings.Replace(string(bench), "\n}\n", "\n\tfmt.Println(\"| allocations per lifecycle todo | 480 allocs |  |  |  |\")\n}\n", 1))
	gitDo("commit", "-q", "-am", "two")
	return dir, first
}

// The tool builds both commits from git (the repository untouched), runs
// each the asked number of times, and prints both sides of every figure
// and benchstat's table of the same samples, which it keeps.
func TestCompareBenchmarks(t *testing.T) {
	dir, first := fixtureRepo(t)
	out := t.TempDir()
	var w, progress bytes.Buffer
	err := run(options{n: 2, bench: "BenchmarkSum", pkg: ".", benchtime: "200x", old: first, new: "HEAD", repo: dir, out: out, progress: &progress}, &w)
	require.NoError(t, err, progress.String())
	text := w.String()
	t.Log(text)
	for _, want := range []string{"BenchmarkSum", "ns/op", "allocs/op", "new/old", "vs base", "old: " + first} {
		require.Contains(t, text, want)
	}
	old, err := os.ReadFile(filepath.Join(out, "old.txt"))
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(old), "BenchmarkSum"), "one sample a run")
	require.Equal(t, 4, strings.Count(progress.String(), "run "), "two runs a side")
	status := exec.Command("git", "status", "--porcelain")
	status.Dir = dir
	st, err := status.Output()
	require.NoError(t, err)
	require.Empty(t, string(st), "the repository is not touched")
}

// -figures runs examples/bench's group and reads its table: each row's
// value in its unit and its ratio to its same-run baseline.
func TestCompareFigures(t *testing.T) {
	dir, first := fixtureRepo(t)
	var w, progress bytes.Buffer
	err := run(options{n: 1, figures: "lifecycle", d: "1s", old: first, new: ".", repo: dir, out: t.TempDir(), progress: &progress}, &w)
	require.NoError(t, err, progress.String())
	text := w.String()
	require.Contains(t, text, "Benchmarklifecycle_16_workers")
	require.Contains(t, text, "todos/s")
	require.Contains(t, text, "x-baseline")

	// -new-harness: the old commit built with the new bench, which has a
	// row the old one lacks.
	out := t.TempDir()
	require.NoError(t, run(options{n: 1, figures: "lifecycle", d: "1s", old: first, new: "HEAD", newHarness: true, repo: dir, out: out, progress: &progress}, &w))
	old, err := os.ReadFile(filepath.Join(out, "old.txt"))
	require.NoError(t, err)
	require.Contains(t, string(old), "Benchmarkallocations_per_lifecycle_todo 1 480 allocs")
	require.Error(t, run(options{n: 1, figures: "lifecycle", d: "1s", old: ".", new: "HEAD", newHarness: true, repo: dir, out: t.TempDir(), progress: &progress}, &w), "the working tree is never written over")
}

func TestFigureLines(t *testing.T) {
	table := `| figure | value | baseline (same run) | ratio | target |
|---|---|---|---|---|
| raw bbolt: one Put per Update, 1 writer | 4280 commits/s |  |  | baseline |
| lifecycle with a webhook on every todo (1069 delivered meanwhile) | 5354 todos/s | lifecycle without 7800 todos/s | 0.68× | ≥ 0.7× |
| Claim, 1,000 ready | 141 µs |  |  |  |
`
	require.Equal(t, []string{
		"Benchmarkraw_bbolt_one_Put_per_Update_1_writer 1 4280 commits/s",
		"Benchmarklifecycle_with_a_webhook_on_every_todo 1 5354 todos/s 0.68 x-baseline",
		"BenchmarkClaim_1_000_ready 1 141 µs",
	}, figureLines(table))
	got, order := parse(figureLines(table))
	require.Len(t, order, 4)
	require.Equal(t, []float64{0.68}, got[metric{"Benchmarklifecycle_with_a_webhook_on_every_todo", "x-baseline"}])
}
