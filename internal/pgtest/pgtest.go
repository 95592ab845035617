// Package pgtest gives tests a real PostgreSQL: a throwaway cluster of
// this machine's PostgreSQL binaries (initdb into a directory of its own,
// listening on a Unix socket only, no system service), started by the
// first test that needs it and reused by every later test binary, and a
// fresh schema of it per test, dropped when the test ends.
//
// The suites that run on both engines (queue/store's, the queue's
// conformance suite, the kill -9 durability test) take their database
// from DB: a SQLite file unless HARVEST_TEST_DB=postgres, when they run on
// PostgreSQL instead; scripts/test.sh runs them both ways. Asked for
// PostgreSQL, a cluster that cannot start is a failure, never a skip.
//
// initdb and postgres refuse to run as root: as root the cluster runs as
// the postgres account (made by Debian's package) or nobody, its
// directory theirs.
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"

	"github.com/harvest-hpc/harvest/internal/pgscratch"
)

// Env selects the engine of the suites that run on both: "postgres", or
// SQLite when unset.
const Env = "HARVEST_TEST_DB"

// Enabled reports whether the suites run on PostgreSQL.
func Enabled() bool { return os.Getenv(Env) == "postgres" }

// DB is a test's queue database: sqlitePath, or, when Enabled, the URL of
// a fresh PostgreSQL schema (URL).
func DB(t testing.TB, sqlitePath string) string {
	t.Helper()
	if !Enabled() {
		return sqlitePath
	}
	return URL(t)
}

var (
	once    sync.Once
	base    string // URL of the cluster's postgres database
	onceErr error
)

// URL returns the URL of an empty schema of the test cluster (its
// search_path), made for t and dropped when t ends. HARVEST_PG_URL names
// a server to use instead of the throwaway cluster.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if u := os.Getenv("HARVEST_PG_URL"); u != "" {
			base = u
			return
		}
		base, onceErr = start()
	})
	if onceErr != nil {
		t.Fatalf("PostgreSQL for the tests: %v", onceErr)
	}
	u, drop, err := pgscratch.New(context.Background(), base, "t_")
	if err != nil {
		t.Fatalf("PostgreSQL for the tests: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("drop the test's schema: %v", err)
		}
	})
	return u
}

// Dir is the cluster's directory: $HARVEST_PG_DIR, or one per user under
// the temporary directory.
func Dir() string {
	if d := os.Getenv("HARVEST_PG_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("harvest-pgtest-%d", os.Getuid()))
}

// Bin is the directory of PostgreSQL's server binaries: $HARVEST_PG_BIN,
// or Debian's newest /usr/lib/postgresql/N/bin.
func Bin() (string, error) {
	if b := os.Getenv("HARVEST_PG_BIN"); b != "" {
		return b, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: install Debian's postgresql package (scripts/deps.sh) or set HARVEST_PG_BIN")
}

func version(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return n
}

// start initialises the cluster in Dir unless it exists, starts it unless
// it runs, and returns its URL; a file lock orders test binaries that
// start at once.
func start() (string, error) {
	bin, err := Bin()
	if err != nil {
		return "", err
	}
	dir := Dir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	u := "postgres://postgres@/postgres?host=" + sock + "&sslmode=disable"
	as, err := account()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		if err := os.MkdirAll(sock, 0o700); err != nil {
			return "", err
		}
		if err := own(dir, as); err != nil {
			return "", err
		}
		if err := run(as, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
			return "", fmt.Errorf("initdb: %w", err)
		}
	}
	if run(as, filepath.Join(bin, "pg_ctl"), "-D", data, "status") == nil {
		return u, ping(u)
	}
	// Unix socket only; enough connections for test binaries at once.
	opts := "-c listen_addresses='' -k " + sock + " -c max_connections=300 -c shared_buffers=64MB"
	if os.Getenv("HARVEST_PG_DURABLE") != "1" {
		// A test server: a crash of the machine may lose it (the tests
		// kill harvest's processes, not PostgreSQL).
		opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if err := run(as, filepath.Join(bin, "pg_ctl"), "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		return "", fmt.Errorf("start PostgreSQL in %s: %w (its log: %s)", data, err, filepath.Join(dir, "log"))
	}
	return u, ping(u)
}

func ping(u string) error {
	db, err := sql.Open("pgx", u)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// account is who runs the cluster: nil for this process's own user, or
// an unprivileged account when this process is root.
func account() (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, n := range []string{"postgres", "nobody"} {
		if u, err := user.Lookup(n); err == nil {
			return u, nil
		}
	}
	return nil, fmt.Errorf("running as root, and neither the postgres account nor nobody exists to run PostgreSQL")
}

// own gives dir and everything in it to as.
func own(dir string, as *user.User) error {
	if as == nil {
		return nil
	}
	uid, _ := strconv.Atoi(as.Uid)
	gid, _ := strconv.Atoi(as.Gid)
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// run runs a PostgreSQL program as as (nil: as this process).
func run(as *user.User, prog string, args ...string) error {
	if as != nil {
		args = append([]string{"-u", as.Username, "--", prog}, args...)
		prog = "runuser"
	}
	cmd := exec.Command(prog, args...)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
