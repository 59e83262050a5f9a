package postgres_test

// Servers of the test's own, started from the PostgreSQL binaries: a
// primary, a standby made with pg_basebackup, a postmaster killed with
// SIGKILL, a standby promoted — what the failover and hung-commit tests
// need and a shared server cannot give.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/switchboardtest"
)

// pgBin returns the directory of the PostgreSQL server binaries, or skips
// the test saying why (.ci/postgres installs them).
func pgBin(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); fileExists(filepath.Join(d, "initdb")) {
			return d
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if fileExists(filepath.Join(dirs[i], "initdb")) {
			return dirs[i]
		}
	}
	switchboardtest.Skip(t, "no PostgreSQL server binaries (initdb): install Debian's postgresql package (.ci/postgres start does)")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// pgServer is one server of a test's cluster.
type pgServer struct {
	t    *testing.T
	bin  string
	dir  string // data directory
	port int
}

// run runs a server binary, as the postgres user when the test runs as
// root (initdb and postgres refuse root).
func (s *pgServer) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(s.bin, name)}, args...)...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// newDataDir returns a fresh directory the server's user owns.
func newDataDir(t *testing.T, what string) string {
	dir, err := os.MkdirTemp("", "switchboard-"+what+"-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root, the servers run as the postgres user")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	return dir
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newPrimary initdbs and starts a server on a free loopback port, with
// the settings a primary with standbys needs and conf added to its
// configuration. fsync is off: the tests kill processes, never the
// machine, so the page cache survives every crash they make.
func newPrimary(t *testing.T, conf ...string) *pgServer {
	s := &pgServer{t: t, bin: pgBin(t), port: freePort(t)}
	s.dir = filepath.Join(newDataDir(t, "primary"), "data")
	require.NoError(t, s.run("initdb", "-D", s.dir, "-U", "switchboard", "--auth=trust", "-E", "UTF8"))
	s.configure(append([]string{"wal_level = replica", "max_wal_senders = 8", "fsync = off", "max_connections = 100"}, conf...)...)
	s.start()
	return s
}

// newStandby makes a standby of p with pg_basebackup -R, with conf added
// to its configuration, and starts it.
func (p *pgServer) newStandby(name string, conf ...string) *pgServer {
	t := p.t
	s := &pgServer{t: t, bin: p.bin, port: freePort(t)}
	s.dir = filepath.Join(newDataDir(t, "standby"), "data")
	require.NoError(t, s.run("pg_basebackup", "-D", s.dir, "-R", "-X", "stream",
		"-d", fmt.Sprintf("host=127.0.0.1 port=%d user=switchboard application_name=%s", p.port, name)))
	// Whatever the primary waits for, a promoted standby must not wait
	// for a standby of its own.
	s.configure(append([]string{"synchronous_standby_names = ''"}, conf...)...)
	s.start()
	return s
}

// configure appends lines to the server's postgresql.conf (read at the
// next start).
func (s *pgServer) configure(lines ...string) {
	f, err := os.OpenFile(filepath.Join(s.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(s.t, err)
	defer f.Close()
	_, err = fmt.Fprintf(f, "\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n%s\n", s.port, filepath.Dir(s.dir), strings.Join(lines, "\n"))
	require.NoError(s.t, err)
}

func (s *pgServer) start() {
	// The port was free when chosen; another process (tests run in
	// parallel) may have taken it since: then choose again.
	err := s.run("pg_ctl", "-D", s.dir, "-l", s.dir+".log", "-w", "-t", "60", "start")
	for attempt := 0; err != nil && attempt < 3; attempt++ {
		s.port = freePort(s.t)
		f, ferr := os.OpenFile(filepath.Join(s.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(s.t, ferr)
		_, ferr = fmt.Fprintf(f, "\nport = %d\n", s.port)
		require.NoError(s.t, errors.Join(ferr, f.Close()))
		err = s.run("pg_ctl", "-D", s.dir, "-l", s.dir+".log", "-w", "-t", "60", "start")
	}
	require.NoError(s.t, err)
	s.t.Cleanup(func() {
		if fileExists(filepath.Join(s.dir, "postmaster.pid")) {
			_ = s.run("pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop")
		}
	})
}

// stop shuts the server down cleanly.
func (s *pgServer) stop() {
	require.NoError(s.t, s.run("pg_ctl", "-D", s.dir, "-m", "fast", "-w", "stop"))
}

// kill SIGKILLs the postmaster and every process it started, as a machine
// that dies would end them: nothing is flushed, no client is told.
func (s *pgServer) kill() {
	b, err := os.ReadFile(filepath.Join(s.dir, "postmaster.pid"))
	require.NoError(s.t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(s.t, err)
	children := childrenOf(pid) // before the postmaster dies and they are orphaned
	require.NoError(s.t, syscall.Kill(pid, syscall.SIGKILL))
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	require.Eventually(s.t, func() bool {
		if !dead(pid) {
			return false
		}
		for _, c := range children {
			if !dead(c) {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
	_ = os.Remove(filepath.Join(s.dir, "postmaster.pid"))
}

// dead reports whether process pid is gone or a zombie (whoever reaps it
// — init, in a container perhaps nobody — it runs no more).
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after
		// its closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out = append(out, c)
			}
		}
	}
	return out
}

// promote ends the standby's recovery: it takes writes from then on.
func (s *pgServer) promote() {
	require.NoError(s.t, s.run("pg_ctl", "-D", s.dir, "-w", "-t", "60", "promote"))
}

// dsn is a DSN of the server alone.
func (s *pgServer) dsn() string {
	return fmt.Sprintf("postgres://switchboard@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// exec runs SQL on the server.
func (s *pgServer) exec(sql string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn())
	require.NoError(s.t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(s.t, err, sql)
}

// query runs a query of one text value on the server ("" if it fails:
// the callers poll).
func (s *pgServer) query(sql string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn())
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var v any
	if err := conn.QueryRow(ctx, sql).Scan(&v); err != nil || v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// setting changes a reloadable setting with ALTER SYSTEM and waits until
// a new session sees it (the server applies a reload asynchronously).
func (s *pgServer) setting(name, value string) {
	s.exec(fmt.Sprintf(`ALTER SYSTEM SET %s = '%s'`, name, value))
	s.exec(`SELECT pg_reload_conf()`)
	require.Eventually(s.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.dsn())
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var got string
		return conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&got) == nil && got == value
	}, 10*time.Second, 10*time.Millisecond, "%s = %q not applied", name, value)
	time.Sleep(50 * time.Millisecond) // the pool's sessions read it before their next statement
}

// failoverDSN names the servers in order: a client connects to the first
// that takes writes, as a deployment with a standby would configure it.
func failoverDSN(servers ...*pgServer) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", s.port)
	}
	return "postgres://switchboard@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}
