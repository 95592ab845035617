package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
)

// queueFlags configure the queue the agent hosts.
func queueFlags() []cli.Flag {
	return []cli.Flag{
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "no-queue", EnvVars: []string{"HARVEST_NO_QUEUE"}, Usage: "do not host the queue (demand then comes from --backlog or --harvest-while-idle)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "state-dir", Value: "/var/lib/harvest", EnvVars: []string{"HARVEST_STATE_DIR"}, Usage: "`DIR` for the queue database and the pilot token"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "db", EnvVars: []string{"HARVEST_QUEUE_DB"}, Usage: "the queue's database: a SQLite `FILE` or a postgres://USER@HOST/DB URL (default: STATE_DIR/queue.db); several agents may serve one database with --peer"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "shared-dir", EnvVars: []string{"HARVEST_SHARED_DIR"}, Usage: "`DIR` on the shared file system for the masters' checkpoints (default: --state-dir)"}),
		altsrc.NewStringSliceFlag(&cli.StringSliceFlag{Name: "peer", EnvVars: []string{"HARVEST_QUEUE_PEERS"}, Usage: "queue `URL` of another agent serving the same --db (repeatable, or comma-separated): the sweeps run at one agent at a time, and pilots get every URL to fall back on"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "listen", Value: ":8470", EnvVars: []string{"HARVEST_QUEUE_LISTEN"}, Usage: "TCP `ADDR` of the queue API for pilots and remote users"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "advertise", EnvVars: []string{"HARVEST_QUEUE_ADVERTISE"}, Usage: "`URL` pilots use to reach the queue (default: http(s)://HOSTNAME:PORT of --listen)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "socket", Value: api.DefaultSocket, EnvVars: []string{"HARVEST_QUEUE_SOCKET"}, Usage: "Unix socket `PATH` for local users (identity from peer credentials)"}),
		altsrc.NewStringSliceFlag(&cli.StringSliceFlag{Name: "allowed-root", EnvVars: []string{"HARVEST_ALLOWED_ROOTS"}, Usage: "`DIR` datasets and outputs must lie in (repeatable; required with the queue)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "outputs-root", EnvVars: []string{"HARVEST_OUTPUTS_ROOT"}, Usage: "`DIR` for jobs' default output directories (default: next to each dataset)"}),
		altsrc.NewStringSliceFlag(&cli.StringSliceFlag{Name: "admin", EnvVars: []string{"HARVEST_ADMINS"}, Usage: "user `NAME` who is admin on the Unix socket (root always is; repeatable)"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "lease-ttl", Value: queue.DefaultConfig().LeaseTTL, EnvVars: []string{"HARVEST_LEASE_TTL"}, Usage: "master lease time to live: a master killed outright is replaced within this (it renews every TTL/3)"}),
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "realtime-writer", EnvVars: []string{"HARVEST_REALTIME_WRITER"}, Usage: "ignored: the queue no longer runs any thread real-time (kept so that existing configurations start)", Hidden: true}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "max-unfinished-tasks-per-user", Value: queue.DefaultConfig().MaxUnfinishedPerUser, EnvVars: []string{"HARVEST_MAX_UNFINISHED_TASKS_PER_USER"}, Usage: "unfinished tasks (waiting or running) a user may have; a job that would pass it is refused (0: no cap)"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "token-ttl", EnvVars: []string{"HARVEST_TOKEN_TTL"}, Usage: "lifetime of a user or admin token made without --ttl (0: never expires; pilot and site tokens never do)"}),
		altsrc.NewIntFlag(&cli.IntFlag{Name: "max-tokens-per-user", Value: queue.DefaultMaxTokensPerUser, EnvVars: []string{"HARVEST_MAX_TOKENS_PER_USER"}, Usage: "tokens a user may hold per role (user, admin); more are refused until one is revoked"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "zombie-timeout", Value: queue.DefaultConfig().ZombieTimeout, EnvVars: []string{"HARVEST_ZOMBIE_TIMEOUT"}, Usage: "a task without heartbeat for this long is ZOMBIE; twice this, EXPIRED and requeued"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"HARVEST_TLS_CERT"}, Usage: "TLS certificate `FILE` for --listen (with --tls-key)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "tls-key", EnvVars: []string{"HARVEST_TLS_KEY"}, Usage: "TLS key `FILE` for --listen"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "site", Value: api.LocalSite, EnvVars: []string{"HARVEST_SITE"}, Usage: "`NAME` of this cluster among the sites the queue serves (with the hosted queue; a remote queue knows it from the agent token)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "queue", EnvVars: []string{"HARVEST_REMOTE_QUEUE"}, Usage: "use the queue at `URL` (another cluster's agent or `harvest queue serve`) instead of hosting one; needs --agent-token-file"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "agent-token-file", EnvVars: []string{"HARVEST_AGENT_TOKEN_FILE"}, Usage: "`FILE` holding this site's agent token (`harvest admin site add NAME` on the queue makes it)"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "queue-ca", EnvVars: []string{"HARVEST_QUEUE_CA"}, Usage: "CA bundle `FILE` to verify an https --queue"}),
		altsrc.NewStringFlag(&cli.StringFlag{Name: "pilot-queue", EnvVars: []string{"HARVEST_PILOT_QUEUE"}, Usage: "`URL` this site's pilots use to reach the remote queue (default: --queue)"}),
	}
}

// hostedQueue is the queue running inside the agent.
type hostedQueue struct {
	q         *queue.Queue
	api       *httpapi.Server
	listeners []net.Listener
	advertise string
	peers     []string // the other agents' queue URLs on the same database
	token     string
}

// sharedReconcile is how often an agent of a shared database rebuilds its
// in-memory view from the tables: how long another agent's submission or
// cancel may go unseen by this agent's pulls.
const sharedReconcile = 3 * time.Second

// pilotQueue is the queue URL list pilots get: this agent's, then its peers'.
func (h *hostedQueue) pilotQueue() string {
	return strings.Join(append([]string{h.advertise}, h.peers...), ",")
}

// checkQueueFlags refuses queue settings that cannot work. The agent calls
// it before it contacts the batch system, so a bad configuration fails the
// same way whether or not SLURM answers.
func checkQueueFlags(c *cli.Context) error {
	if len(c.StringSlice("allowed-root")) == 0 {
		return errors.New("--allowed-root is required: users' datasets must lie in an allowed root (or run with --no-queue)")
	}
	if sock, state := filepath.Clean(c.String("socket")), filepath.Clean(c.String("state-dir")); strings.HasPrefix(sock, state+string(filepath.Separator)) {
		return fmt.Errorf("--socket %s lies in --state-dir %s, which is private (0700): users could not reach it; put it elsewhere (default %s)", sock, state, api.DefaultSocket)
	}
	return nil
}

// openQueue opens the queue and its listeners from the flags.
func openQueue(c *cli.Context, log *slog.Logger) (*hostedQueue, error) {
	stateDir := c.String("state-dir")
	if err := safefs.PrivateDir(stateDir); err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	if err := checkQueueFlags(c); err != nil {
		return nil, err
	}
	token, err := pilotToken(filepath.Join(stateDir, "pilot.token"))
	if err != nil {
		return nil, err
	}
	cfg := queueSharedConfig(c)
	cfg.DBPath = c.String("db")
	if cfg.DBPath == "" {
		cfg.DBPath = filepath.Join(stateDir, "queue.db")
	}
	var peers []string
	for _, p := range c.StringSlice("peer") {
		peers = append(peers, client.URLs(p)...)
	}
	for _, p := range peers {
		if !strings.HasPrefix(p, "http://") && !strings.HasPrefix(p, "https://") {
			return nil, fmt.Errorf("--peer %q: want the http(s) URL of another agent's queue", p)
		}
	}
	if len(peers) > 0 {
		cfg.Shared, cfg.ReconcileInterval = true, sharedReconcile
	}
	cfg.PilotToken = token
	cfg.Logger = log
	log.Debug("Go processors", "gomaxprocs", hostQueueProcs())
	q, err := queue.Open(cfg)
	if err != nil {
		return nil, err
	}
	h := &hostedQueue{q: q, api: httpapi.New(q, httpapi.DefaultConfig()), token: token, peers: peers}
	fail := func(err error) (*hostedQueue, error) {
		h.close()
		return nil, err
	}
	ls, err := queueListeners(c)
	if err != nil {
		return fail(err)
	}
	h.listeners = ls
	for _, l := range ls {
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			h.advertise = c.String("advertise")
			if h.advertise == "" {
				h.advertise = advertiseURL(a, c.String("tls-cert") != "")
			}
		}
	}
	return h, nil
}

// seedNodeLimits stores --min-nodes/--max-nodes in the queue when they
// were given, so they win at start; `harvest admin nodes` changes them at
// run time.
func (h *hostedQueue) seedNodeLimits(ctx context.Context, c *cli.Context) error {
	var s api.NodesSettings
	if c.IsSet("min-nodes") {
		n := c.Int("min-nodes")
		s.MinNodes = &n
	}
	if c.IsSet("max-nodes") {
		n := c.Int("max-nodes")
		s.MaxNodes = &n
	}
	if s.MinNodes == nil && s.MaxNodes == nil {
		return nil
	}
	_, err := h.q.SetNodes(ctx, s)
	return err
}

func (h *hostedQueue) close() {
	for _, l := range h.listeners {
		l.Close()
	}
	h.q.Close()
}

func advertiseURL(a *net.TCPAddr, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		if hn, err := os.Hostname(); err == nil {
			host = hn
		}
	}
	return fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, fmt.Sprint(a.Port)))
}

// pilotToken reads the pilot token, creating it (0600) on first start.
// It survives restarts so that running pilots keep working.
func pilotToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		if len(tok) < 32 {
			return "", fmt.Errorf("pilot token %s is too short; remove it to have a new one made", path)
		}
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("pilot token: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create pilot token: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(tok + "\n"); err != nil {
		return "", err
	}
	return tok, nil
}
