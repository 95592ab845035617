package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/internal/statelock"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/dbcopy"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	qmetrics "github.com/harvest-hpc/harvest/queue/metrics"
	"github.com/harvest-hpc/harvest/queue/store"
)

// queueCommand runs the queue on its own (tests, development, or a site
// that hosts the queue apart from the agent).
func queueCommand() *cli.Command {
	def := queue.DefaultConfig()
	return &cli.Command{
		Name:  "queue",
		Usage: "run the harvest queue standalone (the agent normally hosts it)",
		Subcommands: []*cli.Command{{
			Name:  "serve",
			Usage: "serve the /v1 queue API on a Unix socket and optionally TCP",
			Description: "Users on this host reach the queue through the Unix socket, which identifies them by their\n" +
				"uid (root is admin). Over TCP every request needs a token (HARVEST_TOKEN for users, the pilot\n" +
				"token for pilots); use --tls-cert/--tls-key when the network is not trusted.\n\n" +
				"GET /metrics serves the queue's Prometheus metrics (users, tasks, sites, the write lock; see\n" +
				"docs/admin.md) to users and admins, or to anybody with --metrics-anonymous.",
			Flags: append(queueServeFlags(def),
				&cli.BoolFlag{Name: "metrics-anonymous", EnvVars: []string{"HARVEST_METRICS_ANONYMOUS"}, Usage: "serve /metrics without a token (the figures name users and sites; only on a trusted network)"},
				&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"HARVEST_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
				&cli.BoolFlag{Name: "log-json", EnvVars: []string{"HARVEST_LOG_JSON"}, Usage: "log as JSON lines"},
			),
			Action: runQueueServe,
		}, {
			Name:      "backup",
			Usage:     "copy the queue database consistently, while the queue runs or not",
			ArgsUsage: "DEST",
			Description: "Writes a consistent copy of the queue's SQLite database to DEST (a new file) through SQLite\n" +
				"(VACUUM INTO: the database as of one commit), checks the copy's integrity and prints its jobs.\n" +
				"The running queue is not stopped nor held up. Never copy queue.db with cp or rsync: its WAL\n" +
				"holds the latest commits. To restore, stop the agent, move the copy in place of queue.db\n" +
				"(remove queue.db-wal and queue.db-shm) and start it. See docs/operations.md.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "db", Value: def.DBPath, EnvVars: []string{"HARVEST_QUEUE_DB"}, Usage: "the queue's SQLite database `FILE` (the agent's: STATE_DIR/queue.db)"},
			},
			Action: runQueueBackup,
		}, {
			Name:  "migrate",
			Usage: "copy the queue from its SQLite file to an empty PostgreSQL database",
			Description: "Copies every row of the queue's SQLite database (jobs, entries, grants, exceptions, counters,\n" +
				"users, usage, tokens, sites, settings, leases) into the PostgreSQL database --to names, in one\n" +
				"transaction, and prints the rows copied per table. A target that holds any queue row is refused\n" +
				"and left alone. Stop the agent (or harvest queue serve) first: this holds its lock of the state\n" +
				"directory. Then start it with --db set to the URL. See docs/queue.md, \"Engines\".",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "db", Value: def.DBPath, EnvVars: []string{"HARVEST_QUEUE_DB"}, Usage: "the queue's SQLite database `FILE` (the agent's: STATE_DIR/queue.db)"},
				&cli.StringFlag{Name: "to", Required: true, Usage: "the PostgreSQL database: a postgres://USER@HOST/DB `URL`"},
			},
			Action: runQueueMigrate,
		}},
	}
}

func runQueueMigrate(c *cli.Context) error {
	from, to := c.String("db"), c.String("to")
	if !store.IsURL(to) {
		return cli.Exit(fmt.Sprintf("harvest queue migrate: --to %q: not a postgres:// URL", to), 2)
	}
	if _, err := os.Stat(from); err != nil {
		return cli.Exit(fmt.Sprintf("harvest queue migrate: --db: %v", err), 2)
	}
	// No queue may write the file meanwhile.
	lock, err := statelock.Acquire(filepath.Dir(from))
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest queue migrate: %v", err), 1)
	}
	defer lock.Release()
	copied, err := dbcopy.Migrate(c.Context, from, to)
	if err != nil {
		return cli.Exit("harvest queue "+err.Error(), 1)
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(copied)) {
		parts = append(parts, fmt.Sprintf("%s %d", t, copied[t]))
	}
	fmt.Fprintf(c.App.Writer, "migrated %s to %s: %s\n", from, store.Redact(to), strings.Join(parts, ", "))
	return nil
}

func runQueueBackup(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("harvest queue backup: name one DEST file (see --help)", 2)
	}
	// The copy holds every job and command: the owner's only from its
	// creation (SQLite creates it with the process's umask).
	syscall.Umask(0o077)
	dest := c.Args().First()
	jobs, err := dbcopy.Backup(c.Context, c.String("db"), dest)
	if err != nil {
		return cli.Exit("harvest queue "+err.Error(), 1)
	}
	fmt.Fprintf(c.App.Writer, "backed up %s to %s: %d jobs, integrity ok\n", c.String("db"), dest, jobs)
	return nil
}

// queueServeFlags are the flags that configure a queue; the agent may
// reuse them.
func queueServeFlags(def queue.Config) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "db", Value: def.DBPath, EnvVars: []string{"HARVEST_QUEUE_DB"}, Usage: "the queue's database: a SQLite `FILE`, or a postgres://USER@HOST/DB URL (docs/queue.md, \"Engines\")"},
		&cli.StringFlag{Name: "socket", Value: api.DefaultSocket, EnvVars: []string{"HARVEST_QUEUE_SOCKET"}, Usage: "Unix socket `PATH` (empty: none)"},
		&cli.StringFlag{Name: "listen", EnvVars: []string{"HARVEST_QUEUE_LISTEN"}, Usage: "TCP `ADDR` for pilots and remote users (empty: none)"},
		&cli.StringFlag{Name: "tls-cert", Usage: "TLS certificate `FILE` for --listen"},
		&cli.StringFlag{Name: "tls-key", Usage: "TLS key `FILE` for --listen"},
		&cli.StringSliceFlag{Name: "allowed-root", EnvVars: []string{"HARVEST_ALLOWED_ROOTS"}, Usage: "`DIR` datasets and outputs must lie in (repeatable)"},
		&cli.StringFlag{Name: "outputs-root", EnvVars: []string{"HARVEST_OUTPUTS_ROOT"}, Usage: "`DIR` for default output directories (DIR/<user>/job-<id>)"},
		&cli.StringFlag{Name: "pilot-token", EnvVars: []string{"HARVEST_PILOT_TOKEN"}, Usage: "the token the pilots of --site authenticate with (other sites' agents register their own)"},
		&cli.StringFlag{Name: "site", Value: api.LocalSite, EnvVars: []string{"HARVEST_SITE"}, Usage: "`NAME` of the site whose pilots use --pilot-token"},
		&cli.StringSliceFlag{Name: "admin", Usage: "`USER` who is admin on the Unix socket besides root (repeatable)"},
		&cli.IntFlag{Name: "max-batch-size", Value: def.MaxBatchSize, Usage: "largest batch size a job may ask for"},
		&cli.IntFlag{Name: "max-unfinished-tasks-per-user", Value: def.MaxUnfinishedPerUser, Usage: "unfinished tasks (waiting or running) a user may have; a job that would pass it is refused (0: no cap)"},
		&cli.IntFlag{Name: "max-tokens-per-user", Value: def.MaxTokensPerUser, Usage: "tokens a user may hold per role (user, admin); more are refused until one is revoked"},
		&cli.DurationFlag{Name: "token-ttl", EnvVars: []string{"HARVEST_TOKEN_TTL"}, Usage: "lifetime of a user or admin token made without --ttl (0: never expires; pilot and site tokens never do)"},
		&cli.BoolFlag{Name: "realtime-writer", EnvVars: []string{"HARVEST_REALTIME_WRITER"}, Usage: "ignored: the queue no longer runs any thread real-time (kept so that existing configurations start)", Hidden: true},
		&cli.DurationFlag{Name: "zombie-timeout", Value: def.ZombieTimeout, Usage: "no heartbeat for this long: ZOMBIE; twice: EXPIRED"},
		&cli.DurationFlag{Name: "lease-ttl", Value: def.LeaseTTL, Usage: "master lease time to live: a master killed outright is replaced within this (it renews every TTL/3)"},
		&cli.DurationFlag{Name: "retention", Value: def.Retention, Usage: "final jobs are purged after this"},
		&cli.DurationFlag{Name: "expiry", Value: def.DefaultExpiry, Usage: "default: a job still waiting after this is ERROR_EW"},
	}
}

// queueConfigFromFlags maps the flags onto a queue.Config.
func queueConfigFromFlags(c *cli.Context) queue.Config {
	cfg := queueSharedConfig(c)
	cfg.DBPath = c.String("db")
	cfg.PilotToken = c.String("pilot-token")
	cfg.MaxBatchSize = c.Int("max-batch-size")
	cfg.Retention = c.Duration("retention")
	cfg.DefaultExpiry = c.Duration("expiry")
	return cfg
}

// queueSharedConfig maps the queue flags that `harvest queue serve` and
// `harvest agent` (which hosts the queue) both have.
func queueSharedConfig(c *cli.Context) queue.Config {
	cfg := queue.DefaultConfig()
	cfg.AllowedRoots = c.StringSlice("allowed-root")
	cfg.OutputsRoot = c.String("outputs-root")
	cfg.Admins = c.StringSlice("admin")
	cfg.ZombieTimeout = c.Duration("zombie-timeout")
	cfg.LeaseTTL = c.Duration("lease-ttl")
	cfg.LocalSite = c.String("site")
	cfg.MaxTokensPerUser = c.Int("max-tokens-per-user")
	cfg.TokenTTL = c.Duration("token-ttl")
	cfg.MaxUnfinishedPerUser = c.Int("max-unfinished-tasks-per-user")
	return cfg
}

// queueListeners opens the socket and TCP listeners the flags ask for.
func queueListeners(c *cli.Context) ([]net.Listener, error) {
	var ls []net.Listener
	if s := c.String("socket"); s != "" {
		l, err := httpapi.ListenUnix(s)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	if a := c.String("listen"); a != "" {
		l, err := httpapi.ListenTCP(a, c.String("tls-cert"), c.String("tls-key"))
		if err != nil {
			for _, x := range ls {
				x.Close()
			}
			return nil, err
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return nil, errors.New("neither --socket nor --listen: nobody could reach the queue")
	}
	return ls, nil
}

func runQueueServe(c *cli.Context) error {
	if err := checkAdminFlags(c); err != nil {
		return cli.Exit("harvest queue serve: "+err.Error(), 2)
	}
	log := newLogger(os.Stderr, c.String("log-level"), c.Bool("log-json"))
	cfg := queueConfigFromFlags(c)
	cfg.Logger = log
	log.Debug("Go processors", "gomaxprocs", hostQueueProcs())
	paceCollector()
	// One queue per SQLite file's directory: a second would hand out the
	// same tasks twice (the lock goes with the process, however it ends).
	// On PostgreSQL, queues on several hosts share the database.
	if !store.IsURL(cfg.DBPath) {
		lock, err := statelock.Acquire(filepath.Dir(cfg.DBPath))
		if err != nil {
			return cli.Exit(fmt.Sprintf("harvest queue serve: %v", err), 1)
		}
		defer lock.Release()
	}
	q, err := queue.Open(cfg)
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest queue serve: %v", err), 2)
	}
	defer q.Close()
	ls, err := queueListeners(c)
	if err != nil {
		return cli.Exit(fmt.Sprintf("harvest queue serve: %v", err), 2)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv := httpapi.New(q, httpapi.DefaultConfig())
	return srv.ServeHandler(ctx, queueServeHandler(q, srv, c.Bool("metrics-anonymous")), ls...)
}

// queueServeHandler is the /v1 API with the queue's metrics beside it.
func queueServeHandler(q *queue.Queue, srv *httpapi.Server, metricsAnonymous bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(api.PathMetrics, qmetrics.Handler(qmetrics.NewRegistry(q), srv, metricsAnonymous))
	mux.Handle("/", srv.Handler())
	return mux
}

// Client side: every user/admin command finds the queue the same way.

func clientFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "queue", EnvVars: []string{"HARVEST_QUEUE"}, Value: "unix://" + api.DefaultSocket, Usage: "queue `URL`: unix:///path/to/queue.sock or http(s)://host:port, or a comma-separated list of the agents serving one database (tried in turn)"},
		&cli.StringFlag{Name: "token", Usage: "bearer token (default: HARVEST_TOKEN, else ~/.config/harvest/token; not needed on the socket)"},
		&cli.StringFlag{Name: "ca", EnvVars: []string{"HARVEST_CA"}, Usage: "CA bundle `FILE` to verify an https queue"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
	}
}

// tokenFile is where `harvest token create --save` keeps a user's token.
func tokenFile() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "harvest", "token")
}

func newQueueClient(c *cli.Context) (*client.Client, error) {
	cfg := client.DefaultConfig()
	cfg.URL = c.String("queue")
	cfg.CAFile = c.String("ca")
	cfg.Token = c.String("token")
	if cfg.Token == "" {
		cfg.Token = os.Getenv("HARVEST_TOKEN")
	}
	if cfg.Token == "" && slices.ContainsFunc(client.URLs(cfg.URL), func(u string) bool { return !strings.HasPrefix(u, "unix:") }) {
		if b, err := os.ReadFile(tokenFile()); err == nil {
			cfg.Token = strings.TrimSpace(string(b))
		}
	}
	return client.New(cfg)
}

// args are a command's positional arguments and those after "--".
type args struct {
	pos, rest []string
}

// withClient wraps an action that needs a queue client: it applies flags
// given after positional arguments first (see interspersed), so that
// `harvest status 7 --queue URL` works; queue errors become one clear line
// and exit code 1, usage errors exit 2.
func withClient(fn func(c *cli.Context, cl *client.Client, a args) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		pos, rest, err := interspersed(c)
		if err != nil {
			return cli.Exit(fmt.Sprintf("harvest %s: %v", c.Command.Name, err), 2)
		}
		if c.Command.ArgsUsage == "" && len(pos) > 0 {
			// A stray word was ignored: `admin nodes 5` showed the limits.
			return cli.Exit(fmt.Sprintf("harvest %s takes no arguments, got %q (flags: --help)", c.Command.FullName(), pos), 2)
		}
		cl, err := newQueueClient(c)
		if err != nil {
			return cli.Exit(fmt.Sprintf("harvest %s: %v", c.Command.Name, err), 2)
		}
		if err := fn(c, cl, args{pos, rest}); err != nil {
			var ec cli.ExitCoder
			if errors.As(err, &ec) {
				return err
			}
			return cli.Exit(fmt.Sprintf("harvest %s: %v", c.Command.Name, err), 1)
		}
		return nil
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
