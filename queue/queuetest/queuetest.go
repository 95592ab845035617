// Package queuetest runs a real queue for tests: a temporary database and
// allowed root, a settable clock, tokens for alice, bob, an admin and the
// pilots, datasets on disk, the HTTP API on a loopback port, and a dump of
// every table to prove that a request changed nothing.
package queuetest

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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the read-only view of the database

	"github.com/harvest-hpc/harvest/internal/pgtest"
	"github.com/harvest-hpc/harvest/internal/unixacct"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/harvest-hpc/harvest/queue/store"
)

// PilotToken is the pilots' token of every Env.
const PilotToken = "pilot-secret-token"

// Clock is a settable clock for virtual time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at 2026-01-01 12:00 UTC.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Config is a queue configuration under dir: database dir/queue.db,
// allowed root dir/data, outputs dir/data/out, the pilot token, the clock,
// background loops out of the way (tests call Sweep and FlushUsage) and
// logs discarded.
func Config(dir string, clock *Clock) queue.Config {
	cfg := queue.DefaultConfig()
	cfg.DBPath = filepath.Join(dir, "queue.db")
	cfg.AllowedRoots = []string{filepath.Join(dir, "data")}
	cfg.OutputsRoot = filepath.Join(dir, "data", "out")
	cfg.PilotToken = PilotToken
	cfg.Now = clock.Now
	cfg.SweepInterval, cfg.FlushInterval, cfg.ReconcileInterval = time.Hour, time.Hour, time.Hour
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.LookupAccount = TestAccount
	cfg.Admins = []string{"admin"} // the admin token's holder
	return cfg
}

// TestUIDs maps the test users to Unix uids: alice and admin are the
// test's own uid (the files a test makes are theirs), bob and others are
// uids that own nothing here.
func TestUIDs(name string) (uint32, error) {
	switch name {
	case "alice", "admin":
		return uint32(os.Getuid()), nil
	case "bob":
		return uint32(os.Getuid()) + 4242, nil
	}
	return 0, fmt.Errorf("no Unix account %q", name)
}

// SharedDir is t.TempDir() where other users (bob) may reach the data,
// as on a shared file system: a test's temporary directories are 0700,
// and a dataset must be readable by its submitter's account.
func SharedDir(t testing.TB) string {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestAccount is the test users' Unix accounts: TestUIDs' uids, no
// groups (bob reads what others may).
func TestAccount(name string) (unixacct.Account, error) {
	uid, err := TestUIDs(name)
	return unixacct.Account{UID: uid}, err
}

// Env is a queue under test with its directories, clock and tokens.
type Env struct {
	T      testing.TB
	Q      *queue.Queue
	Cfg    queue.Config
	Clock  *Clock
	Dir    string            // temp dir; the allowed root is Dir/data
	Data   string            // Dir/data
	Tokens map[string]string // alice, bob, admin, pilot

	db  *sql.DB
	srv *httptest.Server
}

// New opens a queue in a temporary directory (mods change its config
// first) with tokens for alice, bob (users) and admin.
func New(t testing.TB, mods ...func(*queue.Config)) *Env {
	t.Helper()
	dir := SharedDir(t)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock := NewClock()
	cfg := Config(dir, clock)
	cfg.DBPath = pgtest.DB(t, cfg.DBPath) // HARVEST_TEST_DB=postgres: a PostgreSQL schema of its own
	for _, m := range mods {
		m(&cfg)
	}
	q, err := queue.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, Q: q, Cfg: cfg, Clock: clock, Dir: dir, Data: data, Tokens: map[string]string{"pilot": PilotToken}}
	t.Cleanup(func() {
		if e.srv != nil {
			e.srv.Close()
		}
		if e.db != nil {
			e.db.Close()
		}
		q.Close()
	})
	for _, u := range []struct{ name, role string }{{"alice", api.RoleUser}, {"bob", api.RoleUser}, {"admin", api.RoleAdmin}} {
		tok, err := q.CreateToken(t.Context(), u.name, u.role)
		if err != nil {
			t.Fatal(err)
		}
		e.Tokens[u.name] = tok.Token
	}
	return e
}

// Reopen closes the queue and opens it again on the same database with
// its configuration changed by mods, as an admin restarting it with other
// flags would; the API served by URL is the new queue's.
func (e *Env) Reopen(mods ...func(*queue.Config)) {
	e.T.Helper()
	if e.srv != nil {
		e.srv.Close()
		e.srv = nil
	}
	if err := e.Q.Close(); err != nil {
		e.T.Fatal(err)
	}
	for _, m := range mods {
		m(&e.Cfg)
	}
	q, err := queue.Open(e.Cfg)
	if err != nil {
		e.T.Fatal(err)
	}
	e.Q = q
	e.T.Cleanup(func() { q.Close() })
}

// Dataset creates the directory Data/name with n entries (sub-directories
// e00000, e00001, ...) and returns its path.
func (e *Env) Dataset(name string, n int) string {
	p := filepath.Join(e.Data, name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		e.T.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := os.Mkdir(filepath.Join(p, fmt.Sprintf("e%05d", i)), 0o755); err != nil && !os.IsExist(err) {
			e.T.Fatal(err)
		}
	}
	return p
}

// DB is a read-only view of the queue's database (WAL: it sees every
// committed write), or a connection to its PostgreSQL schema. Its tasks
// view derives each entry's state from the entries, grants and exceptions
// (store/schema/migrations/008_grants.sql). Its statements take $1.. on
// PostgreSQL (Count and Snapshot take ? on both).
func (e *Env) DB() *sql.DB {
	if e.db == nil && store.IsURL(e.Cfg.DBPath) {
		db, err := sql.Open("pgx", e.Cfg.DBPath)
		if err != nil {
			e.T.Fatal(err)
		}
		e.db = db
	}
	if e.db == nil {
		db, err := sql.Open("sqlite3", "file:"+e.Cfg.DBPath+"?"+url.Values{"_query_only": {"1"}, "_busy_timeout": {"5000"}}.Encode())
		if err != nil {
			e.T.Fatal(err)
		}
		e.db = db
	}
	return e.db
}

// Count runs a query whose answer is one integer.
func (e *Env) Count(query string, args ...any) int {
	e.T.Helper()
	var n int
	if err := e.QueryRow(query, args...).Scan(&n); err != nil {
		e.T.Fatal(err)
	}
	return n
}

// Query and QueryRow run a statement ($N placeholders, in order of first
// appearance) on DB, on either engine.
func (e *Env) Query(query string, args ...any) (*sql.Rows, error) {
	return e.DB().Query(query, args...)
}

func (e *Env) QueryRow(query string, args ...any) *sql.Row {
	return e.DB().QueryRow(query, args...)
}

// Snapshot dumps every table, so a test can prove a request changed nothing.
// t is the running test (a fuzz target passes its own).
func (e *Env) Snapshot(t testing.TB) string {
	t.Helper()
	var b bytes.Buffer
	for _, table := range []string{"users", "usage", "tokens", "jobs", "counts", "entries", "grants", "exceptions", "leases", "sites", "settings"} {
		rows, err := e.DB().Query(`SELECT * FROM ` + table + ` ORDER BY 1, 2`)
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

// Handler is the queue's /v1 API with the default limits.
func (e *Env) Handler() http.Handler { return httpapi.New(e.Q, httpapi.DefaultConfig()).Handler() }

// URL starts the API on a loopback port (once) and returns its base URL.
func (e *Env) URL() string {
	if e.srv == nil {
		e.srv = httptest.NewServer(e.Handler())
	}
	return e.srv.URL
}

// Client is a client of the API with who's token, without retries.
func (e *Env) Client(who string) *client.Client {
	cfg := client.DefaultConfig()
	cfg.URL = e.URL()
	cfg.Token = e.Tokens[who]
	cfg.RetryFor = 0
	c, err := client.New(cfg)
	if err != nil {
		e.T.Fatal(err)
	}
	return c
}

// Raw sends a request with a raw body as who (a name in Tokens, or a
// literal token) and returns the status and the JSON error message. It
// fails the test on an answer that is not JSON or an error without a
// message.
func (e *Env) Raw(method, path, who, body string) (int, string) {
	e.T.Helper()
	req, err := http.NewRequest(method, e.URL()+path, strings.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok, ok := e.Tokens[who]; ok {
		req.Header.Set("Authorization", "Bearer "+tok)
	} else if who != "" {
		req.Header.Set("Authorization", "Bearer "+who)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		e.T.Fatalf("%s %s: Content-Type %q, want JSON (body %s)", method, path, ct, b)
	}
	var ae api.Error
	json.Unmarshal(b, &ae)
	if resp.StatusCode >= 400 && ae.Error == "" {
		e.T.Fatalf("%s %s: status %d without a JSON error: %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, ae.Error
}

// Handed submits spec as alice (its dataset: n entries; BatchSize 1 unless
// set), takes the local pool's lease as pilot p1 and pulls pull tasks, as
// a master would: the job and the tasks handed out, with the epoch.
func (e *Env) Handed(t testing.TB, n, pull int, spec api.JobSpec) (api.Job, []pilotproto.Task, int64) {
	t.Helper()
	ctx := context.Background()
	spec.Dataset = e.Dataset(fmt.Sprintf("handed-%d", n), n)
	if spec.Command == nil {
		spec.Command = []string{"p"}
	}
	if spec.BatchSize == 0 {
		spec.BatchSize = 1
	}
	j, err := e.Q.Submit(ctx, "alice", spec)
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.Q.Lease(ctx, pilotproto.LeaseRequest{PilotID: "p1"})
	if err != nil || !l.Granted {
		t.Fatalf("lease: %+v %v", l, err)
	}
	p, err := e.Q.Pull(ctx, pilotproto.PullRequest{Epoch: l.Epoch, Max: pull})
	if err != nil || len(p.Tasks) != pull {
		t.Fatalf("pulled %d of %d tasks: %v", len(p.Tasks), pull, err)
	}
	return j, p.Tasks, l.Epoch
}

// Ptr returns a pointer to v (optional fields of specs and settings).
func Ptr[T any](v T) *T { return &v }

// AddSite adds site name to the queue, as its admin would, and registers
// its agent with pilot token pilotToken, as the agent would over HTTP:
// Tokens then hold "agent-NAME" (the agent token) and "pilot-NAME".
func (e *Env) AddSite(t testing.TB, name, pilotToken string) {
	t.Helper()
	ctx := context.Background()
	tok, err := e.Q.AddSite(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	e.Tokens["agent-"+name] = tok.Token
	w, err := e.Client("agent-"+name).AgentRegister(ctx, api.AgentRegistration{PilotToken: pilotToken})
	if err != nil || w.Site != name {
		t.Fatalf("register site %s: %+v %v", name, w, err)
	}
	e.Tokens["pilot-"+name] = pilotToken
}
