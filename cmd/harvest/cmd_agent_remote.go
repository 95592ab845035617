package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/adapters"
	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

// remoteQueue is the queue of an agent that does not host one: another
// cluster's agent, or `harvest queue serve`, reached with an agent token.
type remoteQueue struct {
	cl         *client.Client
	site       string
	pilotURL   string
	pilotToken string
	roots      []string // the queue's allowed roots
}

// checkRemoteFlags refuses the hosted queue's settings with --queue.
func checkRemoteFlags(c *cli.Context) error {
	for _, f := range []string{"no-queue", "listen", "advertise", "allowed-root", "outputs-root", "admin", "tls-cert", "tls-key", "lease-ttl", "zombie-timeout", "max-tokens-per-user", "token-ttl", "max-unfinished-tasks-per-user", "realtime-writer", "backlog", "db", "peer"} {
		if c.IsSet(f) {
			return fmt.Errorf("--%s configures a hosted queue; with --queue the remote queue is configured where it runs", f)
		}
	}
	if c.String("agent-token-file") == "" {
		return errors.New("--queue needs --agent-token-file (make the token on the queue with `harvest admin site add NAME`)")
	}
	return nil
}

// openRemoteQueue registers this site's pilot token with the queue and
// learns the site's name from the agent token.
func openRemoteQueue(ctx context.Context, c *cli.Context, info adapters.Info) (*remoteQueue, error) {
	path := c.String("agent-token-file")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--agent-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("--agent-token-file %s is empty", path)
	}
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Token, cfg.CAFile = c.String("queue"), tok, c.String("queue-ca")
	cfg.Timeout = 10 * time.Second
	cl, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--queue: %w", err)
	}
	if err := safefs.PrivateDir(c.String("state-dir")); err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	pilotTok, err := pilotToken(filepath.Join(c.String("state-dir"), "pilot.token"))
	if err != nil {
		return nil, err
	}
	w, err := cl.AgentRegister(ctx, api.AgentRegistration{PilotToken: pilotTok, Adapter: info.Name, Version: info.Version})
	if err != nil {
		return nil, fmt.Errorf("register with the queue %s: %w", cfg.URL, err)
	}
	if c.IsSet("site") && c.String("site") != w.Site {
		return nil, fmt.Errorf("--site %s, but the agent token belongs to site %s", c.String("site"), w.Site)
	}
	pilotURL := c.String("pilot-queue")
	if pilotURL == "" {
		pilotURL = cfg.URL
	}
	for _, u := range client.URLs(pilotURL) {
		if strings.HasPrefix(u, "unix:") {
			return nil, fmt.Errorf("pilots on compute nodes cannot use the Unix socket %s: set --pilot-queue to the queue's http(s) URLs", u)
		}
	}
	return &remoteQueue{cl: cl, site: w.Site, pilotURL: pilotURL, pilotToken: pilotTok, roots: w.AllowedRoots}, nil
}

// pilotEnv is the environment that tells pilots where their queue is and
// which site they run at (tasks see HARVEST_SITE); the admin's --pilot-env
// wins.
func pilotEnv(queueURL, token, sharedDir, site string, admin map[string]string) map[string]string {
	env := map[string]string{"HARVEST_QUEUE": queueURL, "HARVEST_PILOT_TOKEN": token, "HARVEST_STATE_DIR": sharedDir, "HARVEST_SITE": site}
	for k, v := range admin {
		env[k] = v
	}
	return env
}
