package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/agent/web"
	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/queue"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
	"github.com/harvest-hpc/harvest/queue/httpapi"
	qmetrics "github.com/harvest-hpc/harvest/queue/metrics"
)

// opsFlags are the agent's settings for the status page and metrics.
func opsFlags() []cli.Flag {
	return []cli.Flag{
		altsrc.NewBoolFlag(&cli.BoolFlag{Name: "metrics-anonymous", EnvVars: []string{"HARVEST_METRICS_ANONYMOUS"}, Usage: "serve /metrics without a token (the figures name users; only on a trusted network)"}),
		altsrc.NewDurationFlag(&cli.DurationFlag{Name: "chart-window", Value: 6 * time.Hour, EnvVars: []string{"HARVEST_CHART_WINDOW"}, Usage: "how far back the status page's utilisation chart goes (kept in memory)"}),
	}
}

// agentOps are the agent's operations pieces: the admin's pause/drain
// switches, the metrics and the utilisation history.
type agentOps struct {
	ctl     *agent.Control
	metrics *agent.Metrics
	hist    *web.History
}

// newAgentOps opens the control file in the state directory (so a pause
// survives a restart) and makes the metrics; q may be nil (--no-queue).
func newAgentOps(c *cli.Context, q *queue.Queue, log *slog.Logger) (*agentOps, error) {
	if c.Duration("chart-window") <= 0 {
		return nil, fmt.Errorf("--chart-window must be positive, got %v", c.Duration("chart-window"))
	}
	if err := safefs.PrivateDir(c.String("state-dir")); err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	ctl, err := agent.OpenControl(filepath.Join(c.String("state-dir"), "control.json"), log)
	if err != nil {
		return nil, err
	}
	var qs qmetrics.Queue
	if q != nil {
		qs = q
	}
	// One sample per round; keep the window at the poll interval plus room.
	n := int(c.Duration("chart-window")/max(c.Duration("poll"), time.Second)) + 16
	return &agentOps{ctl: ctl, metrics: agent.NewMetrics(qs), hist: web.NewHistory(min(n, 1_000_000))}, nil
}

// hook is the reconciler's OnRound: metrics, history and a drain's
// progress (the drain's cancels are the round's own releases).
func (o *agentOps) hook(res agent.RoundResult) {
	o.metrics.ObserveRound(res)
	o.hist.Observe(res)
	o.ctl.Observe(res)
}

// handler is the mux the agent serves on the queue's listeners.
// webQueue is what the operations endpoints need: the queue service and
// its API's authentication and error answers.
type webQueue struct {
	*queue.Queue
	*httpapi.Server
}

var _ web.Queue = webQueue{}

func (o *agentOps) handler(c *cli.Context, h *hostedQueue, r web.Rounds, adapterName, giveBack string, log *slog.Logger) (http.Handler, error) {
	cfg := web.DefaultConfig()
	cfg.Queue, cfg.Rounds, cfg.Control, cfg.Metrics, cfg.History = webQueue{h.q, h.api}, r, o.ctl, o.metrics, o.hist
	cfg.MetricsAnonymous = c.Bool("metrics-anonymous")
	cfg.ChartWindow = c.Duration("chart-window")
	cfg.Adapter, cfg.GiveBack = adapterName, giveBack
	// Absolute, so that harvest explain finds them from any directory.
	cfg.StateDir = absPath(c.String("state-dir"))
	cfg.DumpDir = absPath(c.String("dump-snapshots"))
	cfg.Log = log
	return web.Handler(cfg, h.api.Handler())
}

// absPath makes p absolute ("" stays "").
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func (h *hostedQueue) serveWith(ctx context.Context, handler http.Handler) error {
	return h.api.ServeHandler(ctx, handler, h.listeners...)
}

// withAdminOps adds the site admin's day to the admin command: pause,
// resume, harvest (show), drain and token rotate.
func withAdminOps(admin *cli.Command) *cli.Command {
	admin.Subcommands = append(admin.Subcommands,
		&cli.Command{
			Name:  "harvest",
			Usage: "show whether harvesting is paused and how a drain is going",
			Flags: clientFlags(),
			Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
				st, err := cl.Harvest(c.Context)
				if err != nil {
					return err
				}
				return printHarvest(c, st)
			}),
		},
		&cli.Command{
			Name:  "pause",
			Usage: "stop submitting pilots (running pilots keep working and are still released for waiting jobs); survives an agent restart",
			Flags: clientFlags(),
			Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
				st, err := cl.SetPaused(c.Context, true)
				if err != nil {
					return err
				}
				return printHarvest(c, st)
			}),
		},
		&cli.Command{
			Name:  "resume",
			Usage: "submit pilots again (ends a drain)",
			Flags: clientFlags(),
			Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
				st, err := cl.SetPaused(c.Context, false)
				if err != nil {
					return err
				}
				return printHarvest(c, st)
			}),
		},
		&cli.Command{
			Name:  "drain",
			Usage: "before maintenance: pause, cancel idle pilots at once and busy ones after their current batch (--now: all at once), and show progress until none is left",
			Flags: append(clientFlags(),
				&cli.BoolFlag{Name: "now", Usage: "cancel busy pilots at once too (their tasks are requeued)"},
				&cli.BoolFlag{Name: "no-wait", Usage: "start the drain and return without waiting"},
				&cli.DurationFlag{Name: "timeout", Value: time.Hour, Usage: "give up waiting after this (the drain goes on in the agent)"},
				&cli.DurationFlag{Name: "every", Value: 2 * time.Second, Usage: "how often to show progress"},
			),
			Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
				st, err := cl.Drain(c.Context, c.Bool("now"))
				if err != nil {
					return err
				}
				if c.Bool("no-wait") || c.Bool("json") {
					return printHarvest(c, st)
				}
				return waitDrain(c.Context, c.App.Writer, cl, c.Duration("timeout"), c.Duration("every"))
			}),
		},
	)
	for _, sc := range admin.Subcommands {
		if sc.Name == "token" {
			sc.Subcommands = append(sc.Subcommands, tokenRotateCommand())
		}
	}
	return admin
}

func printHarvest(c *cli.Context, st api.HarvestState) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, st)
	}
	w := c.App.Writer
	switch {
	case !st.Paused:
		fmt.Fprintln(w, "harvesting: running")
	case st.PausedAt > 0:
		fmt.Fprintf(w, "harvesting: paused since %s\n", unixTime(st.PausedAt))
	default:
		fmt.Fprintln(w, "harvesting: paused")
	}
	if d := st.Drain; d != nil {
		fmt.Fprintln(w, "drain: "+drainLine(*d))
	}
	return nil
}

func drainLine(d api.DrainState) string {
	mode := "graceful (busy pilots finish their batch)"
	if d.Now {
		mode = "now (every pilot cancelled at once)"
	}
	switch {
	case d.Done:
		return fmt.Sprintf("done at %s: no pilot left (%d cancelled by the drain, others released or ended); harvesting stays paused until `harvest admin resume`", unixTime(d.DoneAt), d.Cancelled)
	case d.Remaining < 0:
		return fmt.Sprintf("%s, started %s, waiting for the agent's next round", mode, unixTime(d.StartedAt))
	}
	s := fmt.Sprintf("%s: %d pilot(s) left (%d busy), %d cancelled by the drain", mode, d.Remaining, d.Busy, d.Cancelled)
	if d.LastError != "" {
		s += "; last cancel error: " + d.LastError
	}
	return s
}

// waitDrain shows the drain's progress until no pilot is left.
func waitDrain(ctx context.Context, w io.Writer, cl *client.Client, timeout, every time.Duration) error {
	if every <= 0 {
		return cli.Exit("harvest admin drain: --every must be positive", 2)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		st, err := cl.Harvest(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return cli.Exit(fmt.Sprintf("harvest admin drain: gave up waiting after %v (the drain goes on; check with `harvest admin harvest`)", timeout), 1)
			}
			return err
		}
		if st.Drain == nil {
			return cli.Exit("harvest admin drain: the drain was ended (harvesting resumed) before it finished", 1)
		}
		if line := drainLine(*st.Drain); line != last {
			fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05"), line)
			last = line
		}
		if st.Drain.Done {
			return nil
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return cli.Exit(fmt.Sprintf("harvest admin drain: gave up waiting after %v (the drain goes on; check with `harvest admin harvest`)", timeout), 1)
		case <-t.C:
		}
	}
}

func tokenRotateCommand() *cli.Command {
	return &cli.Command{
		Name:      "rotate",
		Usage:     "revoke every token of USER and print a new one; or, with --pilot, make a new pilot token (run on the agent's host as root)",
		ArgsUsage: "USER | --pilot",
		Description: "A user's rotation is immediate: their old tokens stop working at once (the Unix socket still works).\n" +
			"The pilot token is read by the agent at start and handed to every pilot; --pilot writes a new one into\n" +
			"--state-dir and takes effect when the agent restarts. Running pilots keep the old token and can no\n" +
			"longer reach the queue after the restart, so drain first (harvest admin drain), then restart.",
		Flags: append(clientFlags(),
			&cli.BoolFlag{Name: "admin", Usage: "rotate USER's admin tokens instead of their user tokens"},
			&cli.BoolFlag{Name: "pilot", Usage: "make a new pilot token in --state-dir (effective at the agent's restart)"},
			&cli.StringFlag{Name: "state-dir", Value: "/var/lib/harvest", EnvVars: []string{"HARVEST_STATE_DIR"}, Usage: "the agent's state `DIR` (with --pilot)"},
		),
		Action: func(c *cli.Context) error {
			// Flags may follow USER: apply them before deciding which rotation.
			pos, _, err := interspersed(c)
			if err != nil {
				return cli.Exit("harvest admin token rotate: "+err.Error(), 2)
			}
			if c.Bool("pilot") {
				if len(pos) != 0 || c.Bool("admin") {
					return cli.Exit("harvest admin token rotate: usage: harvest admin token rotate --pilot [--state-dir DIR] (no USER, no --admin)", 2)
				}
				path, err := rotatePilotToken(c.String("state-dir"))
				if err != nil {
					return cli.Exit("harvest admin token rotate: "+err.Error(), 1)
				}
				fmt.Fprintf(c.App.Writer, "new pilot token written to %s\nrestart the agent to use it (drain first: running pilots keep the old token)\n", path)
				return nil
			}
			return withClient(func(c *cli.Context, cl *client.Client, a args) error {
				if len(a.pos) != 1 {
					return cli.Exit("harvest admin token rotate: usage: harvest admin token rotate USER [--admin] | --pilot", 2)
				}
				role := api.RoleUser
				if c.Bool("admin") {
					role = api.RoleAdmin
				}
				rot, err := cl.RotateToken(c.Context, api.TokenRotateRequest{User: a.pos[0], Role: role})
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, rot)
				}
				fmt.Fprintf(c.App.ErrWriter, "%d old %s token(s) of %s revoked; the new one (shown once):\n", rot.Revoked, role, a.pos[0])
				fmt.Fprintln(c.App.Writer, rot.Token.Token)
				return nil
			})(c)
		},
	}
}

// rotatePilotToken replaces the pilot token file atomically (0600), in
// the format pilotToken reads.
func rotatePilotToken(stateDir string) (string, error) {
	path := filepath.Join(stateDir, "pilot.token")
	if _, err := os.Stat(stateDir); err != nil {
		return "", fmt.Errorf("--state-dir: %w", err)
	}
	// The agent's own check: a directory another user controls would
	// hand them the new token.
	if err := safefs.PrivateDir(stateDir); err != nil {
		return "", fmt.Errorf("--state-dir: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(stateDir, ".pilot.token-*")
	if err != nil {
		return "", fmt.Errorf("write pilot token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", err
	}
	if _, err := tmp.WriteString(hex.EncodeToString(raw) + "\n"); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("write pilot token: %w", err)
	}
	return path, nil
}
