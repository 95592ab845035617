package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

func usersCommand() *cli.Command {
	return &cli.Command{
		Name:  "users",
		Usage: "show every user's fair-share standing: priority, usage over 24 h, quotas",
		Flags: clientFlags(),
		Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
			us, err := cl.Users(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				if us == nil {
					us = []api.User{}
				}
				return printJSON(c.App.Writer, us)
			}
			if len(us) == 0 {
				fmt.Fprintln(c.App.Writer, "no users yet")
				return nil
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "USER\tPRIORITY\tCOMPUTED\tRUNNING\tMAX CORES\tCPU 24H (s)\tMAX CPU\tCOST 24H\tMAX COST\tWAITING")
			for _, u := range us {
				computed := fmt.Sprintf("%.3f", u.ComputedPriority)
				if u.ComputedPriority < 0 {
					computed = "over quota"
				}
				fmt.Fprintf(tw, "%s\t%g\t%s\t%d\t%d\t%.0f\t%.3g\t%.0f\t%.3g\t%d\n", u.Name, u.Priority, computed,
					u.RunningCores, u.MaxCores, u.CPUTime24h, u.MaxCPUTime, u.Cost24h, u.MaxCost, u.WaitingTasks)
			}
			return tw.Flush()
		}),
	}
}

func adminCommand() *cli.Command {
	return &cli.Command{
		Name:  "admin",
		Usage: "site administration of the queue (admin role: root on the socket, or an admin token)",
		Subcommands: []*cli.Command{
			{
				Name:  "user",
				Usage: "per-user priority and quotas",
				Subcommands: []*cli.Command{{
					Name:      "set",
					Usage:     "set a user's baseline priority and quotas (unset flags keep their value)",
					ArgsUsage: "NAME",
					Flags: append(clientFlags(),
						&cli.Float64Flag{Name: "priority", Usage: "baseline priority (> 0; the highest user's is the reference)"},
						&cli.IntFlag{Name: "max-cores", Usage: "cores running at once (JAliEn's maxParallelJobs, default 20)"},
						&cli.Float64Flag{Name: "max-cpu-time", Usage: "CPU seconds per 24 h (default 1e7)"},
						&cli.Float64Flag{Name: "max-cost", Usage: "cost (cores x seconds x price) per 24 h (default 1e7)"},
						&cli.BoolFlag{Name: "create", Usage: "create NAME if the queue does not know it yet (without it an unknown name is refused: a typo)"},
					),
					Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
						pos := a.pos
						if len(pos) != 1 {
							return cli.Exit("harvest admin user set: usage: harvest admin user set NAME [--priority P] [--max-cores N] [--max-cpu-time S] [--max-cost C] [--create]", 2)
						}
						if !c.IsSet("priority") && !c.IsSet("max-cores") && !c.IsSet("max-cpu-time") && !c.IsSet("max-cost") {
							return cli.Exit("harvest admin user set: nothing to set: give --priority, --max-cores, --max-cpu-time or --max-cost (`harvest users` shows the settings)", 2)
						}
						for _, f := range []string{"priority", "max-cpu-time", "max-cost"} {
							if v := c.Float64(f); c.IsSet(f) && (math.IsNaN(v) || math.IsInf(v, 0)) {
								return cli.Exit(fmt.Sprintf("harvest admin user set: --%s must be a positive number, got %v", f, v), 2)
							}
						}
						s := api.UserSettings{Create: c.Bool("create")}
						if c.IsSet("priority") {
							s.Priority = ptrTo(c.Float64("priority"))
						}
						if c.IsSet("max-cores") {
							s.MaxCores = ptrTo(c.Int("max-cores"))
						}
						if c.IsSet("max-cpu-time") {
							s.MaxCPUTime = ptrTo(c.Float64("max-cpu-time"))
						}
						if c.IsSet("max-cost") {
							s.MaxCost = ptrTo(c.Float64("max-cost"))
						}
						u, err := cl.SetUser(c.Context, pos[0], s)
						if err != nil {
							return err
						}
						if c.Bool("json") {
							return printJSON(c.App.Writer, u)
						}
						fmt.Fprintf(c.App.Writer, "user %s: priority %g, max cores %d, max CPU time %g s, max cost %g\n",
							u.Name, u.Priority, u.MaxCores, u.MaxCPUTime, u.MaxCost)
						return nil
					}),
				}},
			},
			{
				Name:  "nodes",
				Usage: "show or set the floor (--min) and cap (--max, 0 = none) of pilot nodes, and the cap across all sites (--global-max)",
				Flags: append(clientFlags(),
					&cli.IntFlag{Name: "min", Usage: "minimum nodes the harvest keeps (MiniNode floor)"},
					&cli.IntFlag{Name: "max", Usage: "maximum nodes the harvest may hold (0: no cap)"},
					&cli.IntFlag{Name: "global-max", Usage: "maximum pilots across all sites sharing the queue (0: no cap)"},
				),
				Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
					var n api.Nodes
					var err error
					if c.IsSet("min") || c.IsSet("max") || c.IsSet("global-max") {
						var s api.NodesSettings
						if c.IsSet("min") {
							s.MinNodes = ptrTo(c.Int("min"))
						}
						if c.IsSet("max") {
							s.MaxNodes = ptrTo(c.Int("max"))
						}
						if c.IsSet("global-max") {
							s.GlobalMaxNodes = ptrTo(c.Int("global-max"))
						}
						n, err = cl.SetNodes(c.Context, s)
					} else {
						n, err = cl.Nodes(c.Context)
					}
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, n)
					}
					maxs := fmt.Sprint(n.MaxNodes)
					if n.MaxNodes == 0 {
						maxs = "no cap"
					}
					rec := "none (or stale)"
					if n.RecommendedAt > 0 {
						rec = fmt.Sprintf("%d (at %s)", n.Recommendation, unixTime(n.RecommendedAt))
					}
					global := "no cap"
					if n.GlobalMaxNodes > 0 {
						global = fmt.Sprint(n.GlobalMaxNodes)
					}
					fmt.Fprintf(c.App.Writer, "min nodes: %d\nmax nodes: %s\nmax nodes across sites: %s\nmaster recommendation: %s\ntasks: %d pending, %d running\n",
						n.MinNodes, maxs, global, rec, n.PendingTasks, n.RunningTasks)
					return nil
				}),
			},
			siteCommand(),
			sitesCommand(),
			{
				Name:  "token",
				Usage: "tokens for HTTP access",
				Subcommands: []*cli.Command{{
					Name:      "create",
					Usage:     "create a token for USER (shown once, stored hashed)",
					ArgsUsage: "USER",
					Flags: append(clientFlags(), &cli.BoolFlag{Name: "admin", Usage: "an admin token instead of a user token"}, ttlFlag(),
						&cli.BoolFlag{Name: "create", Usage: "allow a USER that is neither a user of the queue nor a Unix account here (without it such a name is refused: a typo)"}),
					Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
						pos := a.pos
						if len(pos) != 1 {
							return cli.Exit("harvest admin token create: usage: harvest admin token create USER [--admin] [--create]", 2)
						}
						role := api.RoleUser
						if c.Bool("admin") {
							role = api.RoleAdmin
						}
						ttl, err := ttlSeconds(c)
						if err != nil {
							return err
						}
						t, err := cl.CreateToken(c.Context, api.TokenRequest{User: pos[0], Role: role, Create: c.Bool("create"), TTLSeconds: ttl})
						if err != nil {
							return err
						}
						if c.Bool("json") {
							return printJSON(c.App.Writer, t)
						}
						fmt.Fprintln(c.App.Writer, t.Token)
						return nil
					}),
				}},
			},
		},
	}
}

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "your own token for HTTP access to the queue",
		Subcommands: []*cli.Command{{
			Name:  "create",
			Usage: "create a user token for yourself (ask through the Unix socket); --save writes it to ~/.config/harvest/token",
			Flags: append(clientFlags(), &cli.BoolFlag{Name: "save", Usage: "save it where the CLI looks for it"}, ttlFlag()),
			Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
				ttl, err := ttlSeconds(c)
				if err != nil {
					return err
				}
				t, err := cl.CreateToken(c.Context, api.TokenRequest{TTLSeconds: ttl})
				if err != nil {
					return err
				}
				if !c.Bool("save") {
					fmt.Fprintln(c.App.Writer, t.Token)
					return nil
				}
				p := tokenFile()
				if p == "" {
					return fmt.Errorf("no config directory to save the token in")
				}
				if err := saveToken(p, t.Token); err != nil {
					return fmt.Errorf("save the token in %s: %w", p, err)
				}
				fmt.Fprintf(c.App.Writer, "token for %s saved in %s\n", t.User, p)
				return nil
			}),
		}, {
			Name:  "list",
			Usage: "list your tokens: their IDs (the start of each token's hash: the queue keeps no token itself), roles and ages",
			Flags: append(clientFlags(), &cli.StringFlag{Name: "user", Usage: "(admin) list `USER`'s tokens"}),
			Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
				if len(a.pos) != 0 {
					return cli.Exit("harvest token list: usage: harvest token list [--user USER]", 2)
				}
				ts, err := cl.Tokens(c.Context, c.String("user"))
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, api.TokenList{Tokens: ts})
				}
				tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tUSER\tROLE\tCREATED\tEXPIRES")
				for _, t := range ts {
					exp := "never"
					if t.ExpiresAt != 0 {
						exp = time.Unix(t.ExpiresAt, 0).UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.User, t.Role, time.Unix(t.CreatedAt, 0).UTC().Format(time.RFC3339), exp)
				}
				return tw.Flush()
			}),
		}, {
			Name:      "revoke",
			Usage:     "revoke your token ID (as `harvest token list` shows it): it stops working at once",
			ArgsUsage: "ID",
			Flags:     append(clientFlags(), &cli.StringFlag{Name: "user", Usage: "(admin) revoke `USER`'s token"}),
			Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
				if len(a.pos) != 1 {
					return cli.Exit("harvest token revoke: usage: harvest token revoke ID [--user USER]", 2)
				}
				if err := cl.RevokeToken(c.Context, c.String("user"), a.pos[0]); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "token %s revoked\n", a.pos[0])
				return nil
			}),
		}},
	}
}

// saveToken writes tok to p, readable by its owner only, replacing the
// file whole: os.WriteFile kept an existing file's mode (a token file
// once 0644 stayed readable by everybody) and could leave it half
// written. The directory is harvest's own: only its owner may enter it.
func saveToken(p, tok string) error {
	dir := filepath.Dir(p)
	if err := safefs.PrivateDir(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".token-*") // 0600
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename: nothing
	if _, err := f.WriteString(strings.TrimSpace(tok) + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

func ptrTo[T any](v T) *T { return &v }

// ttlFlag is a new token's lifetime.
func ttlFlag() cli.Flag {
	return &cli.DurationFlag{Name: "ttl", Aliases: []string{"expires"}, Usage: "the token's lifetime, e.g. 720h (default: the queue's --token-ttl; none there: it never expires)"}
}

// ttlSeconds reads --ttl: whole seconds, positive.
func ttlSeconds(c *cli.Context) (int64, error) {
	if !c.IsSet("ttl") {
		return 0, nil
	}
	d := c.Duration("ttl")
	if d < time.Second || d > api.MaxTokenTTL*time.Second {
		return 0, cli.Exit(fmt.Sprintf("harvest %s: --ttl must be at least 1s and at most 10 years, got %v", c.Command.FullName(), d), 2)
	}
	return int64(d / time.Second), nil
}
