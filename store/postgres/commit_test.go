package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/postgres"
)

// cutProxy forwards connections to the server and cuts the connection that
// sends a chunk containing marker, right after forwarding it — before the
// answer can come back — as a network failure would.
type cutProxy struct {
	ln     net.Listener
	dial   func() (net.Conn, error)
	marker []byte // set before the connections are made; nil: never cut
	cuts   atomic.Int32
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, dsn string, marker []byte) (*cutProxy, string) {
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	host, port := cfg.Host, cfg.Port
	p := &cutProxy{marker: marker, dial: func() (net.Conn, error) {
		if strings.HasPrefix(host, "/") {
			return net.Dial("unix", filepath.Join(host, fmt.Sprintf(".s.PGSQL.%d", port)))
		}
		return net.Dial("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	}}
	p.ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = p.ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	p.wg.Go(p.serve)
	proxied := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", cfg.User, p.ln.Addr(), cfg.Database)
	return p, proxied
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := p.dial()
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
		p.wg.Go(func() {
			defer func() { _ = s.Close(); _ = c.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					cut := p.marker != nil && bytes.Contains(buf[:n], p.marker)
					if cut {
						// The client's side goes first, so no answer can
						// reach it; then the chunk goes out.
						_ = c.Close()
						p.cuts.Add(1)
					}
					if _, werr := s.Write(buf[:n]); werr != nil || cut {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// A connection lost while COMMIT is on the way leaves the outcome unknown:
// Update reports ErrCommitUnknown, and the function is not run again (a
// retry could apply it twice).
func TestCommitOutcomeUnknown(t *testing.T) {
	dsn := testDSN(t)
	// The value written is the marker: it travels only in the pipeline
	// that carries the transaction's writes and its COMMIT.
	marker := []byte("cut-the-connection-after-this-value")
	proxy, proxied := newCutProxy(t, dsn, marker)
	table := freshTable(t, dsn)
	for _, each := range []bool{true, false} {
		st := open(t, proxied, postgres.Options{Table: table, CommitEachUpdate: each})
		ctx := context.Background()
		require.NoError(t, st.Update(ctx, func(tx store.Tx) error { return tx.Put("t", []byte("warm"), []byte("up")) }))
		runs := 0
		err := st.Update(ctx, func(tx store.Tx) error {
			runs++
			return tx.Put("t", []byte(fmt.Sprint("k", each)), marker)
		})
		require.ErrorIs(t, err, postgres.ErrCommitUnknown, "CommitEachUpdate=%v", each)
		require.Equal(t, 1, runs, "not run again")
		require.NoError(t, st.Update(ctx, func(tx store.Tx) error { return tx.Put("t", []byte("after"), []byte("ok")) }),
			"the store keeps working on a new connection")
		require.NoError(t, st.Close())
	}
	require.EqualValues(t, 2, proxy.cuts.Load())
}
