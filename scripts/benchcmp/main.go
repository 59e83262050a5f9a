// Command benchcmp compares switchboard's speed at two commits on this
// machine, telling a real change from noise: it builds both, runs the
// chosen figures alternately (old, new, then new, old …) so that drift in
// the machine's load or fsync latency hits both alike, and prints for each
// figure both sides' median and spread, the ratio of the medians, and
// whether the spreads overlap — then benchstat's table of the same samples
// (golang.org/x/perf/cmd/benchstat: medians, confidence intervals, and "~"
// where the difference is not significant).
//
//	go run ./scripts/benchcmp -bench 'BenchmarkCreateFor$|BenchmarkClaimComplete$' 36fd96b HEAD
//	go run ./scripts/benchcmp -figures lifecycle -d 3s -n 10 36fd96b .
//
// OLD and NEW are git revisions; "." is the working tree as it is
// (uncommitted changes included), and NEW defaults to it. With -bench the
// figures are go test benchmarks of -pkg (with -benchmem); with -figures
// they are the rows of one group of examples/bench (its -only), each row's
// value and its ratio to its same-run baseline (raw bbolt, go-oidc), which
// cancels most of the machine's drift. The samples are kept in -out.
//
// Every change on a hot path (CreateFor, claims, Work, Request, a store's
// commit) runs this against the commit before it and quotes the result in
// its commit message.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// benchstat is the version of golang.org/x/perf run for the table.
const benchstat = "golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"

func main() {
	log.SetFlags(0)
	log.SetPrefix("benchcmp: ")
	var o options
	flag.IntVar(&o.n, "n", 6, "runs of each side, alternating")
	flag.StringVar(&o.bench, "bench", "", "go test benchmarks to run (a -test.bench regexp)")
	flag.StringVar(&o.pkg, "pkg", ".", "the package of -bench")
	flag.StringVar(&o.benchtime, "benchtime", "1s", "-test.benchtime of each -bench run")
	flag.StringVar(&o.figures, "figures", "", "examples/bench group to run instead (raw, create, lifecycle, webhook, claim, token, size, proof)")
	flag.StringVar(&o.d, "d", "2s", "examples/bench -d of each -figures run")
	flag.StringVar(&o.extra, "args", "", "more examples/bench flags, space-separated (say \"-big 100000\")")
	flag.StringVar(&o.out, "out", "", "directory for the builds and samples (default: a new temporary one, kept)")
	flag.BoolVar(&o.newHarness, "new-harness", false, "with -figures: build both sides with NEW's examples/bench (figures an older bench lacks, same code measuring both)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./scripts/benchcmp (-bench REGEXP | -figures GROUP) [flags] OLD [NEW]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if (o.bench == "") == (o.figures == "") || flag.NArg() < 1 || flag.NArg() > 2 || o.n < 1 {
		flag.Usage()
		os.Exit(2)
	}
	o.old, o.new = flag.Arg(0), "."
	if flag.NArg() == 2 {
		o.new = flag.Arg(1)
	}
	if err := run(o, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

type options struct {
	n                      int
	bench, pkg, benchtime  string
	figures, d, extra, out string
	old, new               string
	newHarness             bool
	benchstatCmd           []string // the table's command; nil: benchstat at its pinned version
	repo                   string   // the git repository; "" is the current directory's
	progress               io.Writer
}

// side is one of the two builds.
type side struct {
	label, rev, src, bin string
	samples              []string // benchmark-format lines, all runs
}

func run(o options, w io.Writer) error {
	if o.progress == nil {
		o.progress = os.Stderr
	}
	root, err := git(o.repo, "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("not in a git repository: %w", err)
	}
	if o.out == "" {
		if o.out, err = os.MkdirTemp("", "benchcmp"); err != nil {
			return err
		}
	}
	sides := []*side{{label: "old", rev: o.old}, {label: "new", rev: o.new}}
	for i, s := range sides {
		suffix := ""
		if i == 0 && o.newHarness && o.figures != "" {
			suffix = "-new-harness" // not to be reused by a run without it
		}
		if err := s.checkout(root, o.out, suffix); err != nil {
			return err
		}
	}
	if o.newHarness && o.figures != "" {
		if err := sides[0].useHarness(sides[1].src); err != nil {
			return err
		}
	}
	for _, s := range sides {
		fmt.Fprintf(o.progress, "building %s (%s)…\n", s.label, s.rev)
		if err := s.build(o); err != nil {
			return err
		}
	}
	for i := range o.n {
		order := sides
		if i%2 == 1 {
			order = []*side{sides[1], sides[0]}
		}
		for _, s := range order {
			fmt.Fprintf(o.progress, "run %d/%d: %s\n", i+1, o.n, s.label)
			lines, err := s.run(o)
			if err != nil {
				return err
			}
			s.samples = append(s.samples, lines...)
		}
	}
	files := make([]string, len(sides))
	for i, s := range sides {
		files[i] = filepath.Join(o.out, s.label+".txt")
		if err := os.WriteFile(files[i], []byte(strings.Join(s.samples, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "old: %s   new: %s   %d runs each, alternating; samples in %s\n\n", o.old, o.new, o.n, o.out)
	summarize(w, sides[0].samples, sides[1].samples)
	fmt.Fprintln(w)
	cmd := o.benchstatCmd
	if cmd == nil {
		cmd = []string{"go", "run", benchstat}
	}
	bs := exec.Command(cmd[0], append(cmd[1:], files...)...)
	bs.Dir = o.out
	bs.Stdout, bs.Stderr = w, o.progress
	if err := bs.Run(); err != nil {
		fmt.Fprintf(w, "(benchstat did not run: %v; the summary above stands)\n", err)
	}
	return nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// checkout makes s.src: the working tree itself for ".", else the
// revision's tree exported by git archive (the repository is not touched).
func (s *side) checkout(root, out, suffix string) error {
	if s.rev == "." {
		s.src = root
		return nil
	}
	commit, err := git(root, "rev-parse", "--verify", s.rev+"^{commit}")
	if err != nil {
		return fmt.Errorf("%s: %w", s.label, err)
	}
	s.src = filepath.Join(out, s.label+"-"+commit[:12]+suffix)
	if _, err := os.Stat(s.src); err == nil {
		return nil // exported by an earlier run into this -out
	}
	tmp := s.src + ".part"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	archive := exec.Command("git", "archive", commit)
	archive.Dir = root
	untar := exec.Command("tar", "-x", "-C", tmp)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	// One buffer each: the two processes' stderr are copied by two
	// goroutines, which must not share a bytes.Buffer.
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %w: %s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("untar %s: %w: %s", commit, err, untarErr.String())
	}
	return os.Rename(tmp, s.src)
}

// useHarness puts the examples/bench of src in s's tree (an exported
// copy, never the working tree), so both sides run the same measuring code.
func (s *side) useHarness(src string) error {
	if s.rev == "." {
		return fmt.Errorf("-new-harness: OLD is the working tree; name a revision")
	}
	b, err := os.ReadFile(filepath.Join(src, "examples", "bench", "main.go"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.src, "examples", "bench", "main.go"), b, 0o644)
}

func (s *side) build(o options) error {
	s.bin = filepath.Join(o.out, s.label+".bin")
	var cmd *exec.Cmd
	if o.bench != "" {
		cmd = exec.Command("go", "test", "-c", "-o", s.bin, o.pkg)
	} else {
		cmd = exec.Command("go", "build", "-o", s.bin, "./examples/bench")
	}
	cmd.Dir = s.src
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s (%s): %w\n%s", s.label, s.rev, err, out)
	}
	return nil
}

// run runs s's build once and returns its figures as benchmark lines.
func (s *side) run(o options) ([]string, error) {
	var args []string
	if o.bench != "" {
		args = []string{"-test.run", "^$", "-test.bench", o.bench, "-test.benchmem", "-test.count", "1", "-test.benchtime", o.benchtime}
	} else {
		args = append([]string{"-only", o.figures, "-d", o.d}, strings.Fields(o.extra)...)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.src
	if o.bench != "" {
		cmd.Dir = filepath.Join(s.src, o.pkg) // as go test runs it: in the package's directory
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s (%s): %w\n%s%s", s.label, s.rev, err, stdout.String(), stderr.String())
	}
	var lines []string
	if o.bench != "" {
		sc := bufio.NewScanner(&stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "Benchmark") {
				lines = append(lines, sc.Text())
			}
		}
	} else {
		lines = figureLines(stdout.String())
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("%s (%s) printed no figures:\n%s%s", s.label, s.rev, stdout.String(), stderr.String())
	}
	return lines, nil
}

// figureLines turns examples/bench's table (| figure | value unit |
// baseline | ratio | target |) into go test benchmark lines: one per row,
// its value in its unit and, where the row has one, its ratio to its
// same-run baseline as the unit "x-baseline".
func figureLines(table string) []string {
	var out []string
	for _, l := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		if len(cells) < 4 {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		value, unit, ok := strings.Cut(cells[1], " ")
		v, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil {
			continue // the header, the rule
		}
		line := fmt.Sprintf("Benchmark%s 1 %s %s", figureName(cells[0]), strconv.FormatFloat(v, 'g', -1, 64), strings.ReplaceAll(unit, " ", "-"))
		if r, err := strconv.ParseFloat(strings.TrimSuffix(cells[3], "×"), 64); err == nil {
			line += " " + strconv.FormatFloat(r, 'g', -1, 64) + " x-baseline"
		}
		out = append(out, line)
	}
	return out
}

var (
	nameJunk    = regexp.MustCompile(`[^A-Za-z0-9@]+`)
	parentheses = regexp.MustCompile(`\([^)]*\)`)
	procs       = regexp.MustCompile(`-\d+$`) // go test's -GOMAXPROCS suffix
)

// figureName is a row's name as a benchmark name: words joined by "_",
// with what varies between runs (counts in parentheses) left out.
func figureName(s string) string {
	s = parentheses.ReplaceAllString(s, "")
	return strings.Trim(nameJunk.ReplaceAllString(s, "_"), "_")
}

// metric is one figure in one unit, over all runs of a side.
type metric struct{ name, unit string }

// parse reads benchmark lines into samples per figure and unit, in the
// order met.
func parse(lines []string) (map[metric][]float64, []metric) {
	got := map[metric][]float64{}
	var order []metric
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		name := procs.ReplaceAllString(f[0], "")
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			m := metric{name, f[i+1]}
			if _, ok := got[m]; !ok {
				order = append(order, m)
			}
			got[m] = append(got[m], v)
		}
	}
	return got, order
}

// summarize prints, for each figure both sides have, the medians and
// spreads (min–max) and the ratio new/old of the medians, and says whether
// the spreads overlap: where they do, these runs cannot tell the sides
// apart.
func summarize(w io.Writer, oldLines, newLines []string) {
	olds, order := parse(oldLines)
	news, _ := parse(newLines)
	fmt.Fprintf(w, "%-58s %-14s %22s %22s %7s  %s\n", "figure", "unit", "old median [min–max]", "new median [min–max]", "new/old", "")
	for _, m := range order {
		a, b := olds[m], news[m]
		if len(b) == 0 {
			continue
		}
		ma, mb := median(a), median(b)
		verdict := "spreads overlap: noise at this n"
		if slices.Max(a) < slices.Min(b) || slices.Max(b) < slices.Min(a) {
			verdict = "spreads apart"
		}
		ratio := "—"
		if ma != 0 {
			ratio = fmt.Sprintf("%.3f", mb/ma)
		}
		fmt.Fprintf(w, "%-58s %-14s %22s %22s %7s  %s\n", clip(m.name, 58), m.unit, spread(a), spread(b), ratio, verdict)
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func spread(xs []float64) string {
	return fmt.Sprintf("%s [%s–%s]", num(median(xs)), num(slices.Min(xs)), num(slices.Max(xs)))
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// median returns the middle of xs (the mean of the two middle ones).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
