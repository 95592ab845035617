package queue

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

// fakeClock is a settable clock for virtual time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is a queue under test with its directories, clock and tokens.
type env struct {
	t      *testing.T
	q      *Queue
	clock  *fakeClock
	dir    string // temp dir; allowed root is dir/data
	data   string
	srv    *httptest.Server
	tokens map[string]string // alice, bob, admin
}

const pilotToken = "pilot-secret-token"

func testConfig(dir string, clock *fakeClock) Config {
	cfg := DefaultConfig()
	cfg.DBPath = filepath.Join(dir, "queue.db")
	cfg.AllowedRoots = []string{filepath.Join(dir, "data")}
	cfg.OutputsRoot = filepath.Join(dir, "data", "out")
	cfg.PilotToken = pilotToken
	cfg.Now = clock.Now
	// Background loops stay out of the way; tests call Sweep/FlushUsage.
	cfg.SweepInterval, cfg.FlushInterval, cfg.ReconcileInterval = time.Hour, time.Hour, time.Hour
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

func newEnv(t testing.TB, mods ...func(*Config)) *env {
	tt, _ := t.(*testing.T)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	cfg := testConfig(dir, clock)
	for _, m := range mods {
		m(&cfg)
	}
	q, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: tt, q: q, clock: clock, dir: dir, data: data, tokens: map[string]string{}}
	e.srv = httptest.NewServer(q.Handler())
	t.Cleanup(func() { e.srv.Close(); q.Close() })
	ctx := context.Background()
	for _, u := range []struct{ name, role string }{{"alice", api.RoleUser}, {"bob", api.RoleUser}, {"admin", api.RoleAdmin}} {
		tok, err := q.CreateToken(ctx, u.name, u.role)
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[u.name] = tok.Token
	}
	e.tokens["pilot"] = pilotToken
	return e
}

// dataset creates dir data/<name> with n entries (sub-directories).
func (e *env) dataset(name string, n int) string {
	p := filepath.Join(e.data, name)
	for i := 0; i < n; i++ {
		if err := os.MkdirAll(filepath.Join(p, fmt.Sprintf("e%05d", i)), 0o755); err != nil {
			e.t.Fatal(err)
		}
	}
	if n == 0 {
		os.MkdirAll(p, 0o755)
	}
	return p
}

func (e *env) client(who string) *client.Client {
	cfg := client.DefaultConfig()
	cfg.URL = e.srv.URL
	cfg.Token = e.tokens[who]
	cfg.RetryFor = 0
	c, err := client.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// raw sends a request with a raw body and returns the status and the
// decoded error message (if any).
func (e *env) raw(method, path, who, body string) (int, string) {
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok, ok := e.tokens[who]; ok {
		req.Header.Set("Authorization", "Bearer "+tok)
	} else if who != "" {
		req.Header.Set("Authorization", "Bearer "+who) // a literal (wrong) token
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		e.t.Fatalf("%s %s: Content-Type %q, want JSON (body %s)", method, path, ct, b)
	}
	var ae api.Error
	json.Unmarshal(b, &ae)
	if resp.StatusCode >= 400 && ae.Error == "" {
		e.t.Fatalf("%s %s: status %d without a JSON error: %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, ae.Error
}

// snapshot dumps every table, so a test can prove a request changed nothing.
func snapshot(t testing.TB, q *Queue) string {
	t.Helper()
	var b bytes.Buffer
	for _, table := range []string{"users", "usage", "tokens", "jobs", "tasks", "results", "lease", "settings"} {
		rows, err := q.r.Query(`SELECT * FROM ` + table + ` ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		fmt.Fprintf(&b, "== %s %v\n", table, cols)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprintf(&b, "%v|", v)
			}
			b.WriteByte('\n')
		}
		rows.Close()
	}
	return b.String()
}

func count(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func ptr[T any](v T) *T { return &v }
