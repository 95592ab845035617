package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

// siteCommand adds and configures the clusters (sites) that share the queue.
func siteCommand() *cli.Command {
	return &cli.Command{
		Name:  "site",
		Usage: "add a cluster (site) whose agent uses this queue, or change its floor, cap or pause",
		Subcommands: []*cli.Command{
			{
				Name:  "add",
				Usage: "register a site and print its agent token (shown once; adding it again replaces the token)",
				Description: "Give the token to the site's agent (mode 0600 file) and start it with\n" +
					"  harvest agent --queue URL --agent-token-file FILE ...\n" +
					"Its pilots form a pool with their own master; the queue splits the work among the sites.",
				ArgsUsage: "NAME",
				Flags:     clientFlags(),
				Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
					if len(a.pos) != 1 {
						return cli.Exit("harvest admin site add: usage: harvest admin site add NAME", 2)
					}
					t, err := cl.AddSite(c.Context, a.pos[0])
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, t)
					}
					fmt.Fprintln(c.App.Writer, t.Token)
					return nil
				}),
			},
			{
				Name:      "set",
				Usage:     "set a site's floor, cap or pause (unset flags keep their value)",
				ArgsUsage: "NAME",
				Flags: append(clientFlags(),
					&cli.IntFlag{Name: "min", Usage: "pilot nodes the site keeps"},
					&cli.IntFlag{Name: "max", Usage: "most pilot nodes the site holds (0: no cap)"},
					&cli.BoolFlag{Name: "pause", Usage: "no new pilots at the site"},
					&cli.BoolFlag{Name: "resume", Usage: "undo --pause"},
				),
				Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
					if len(a.pos) != 1 || (c.Bool("pause") && c.Bool("resume")) {
						return cli.Exit("harvest admin site set: usage: harvest admin site set NAME [--min N] [--max N] [--pause | --resume]", 2)
					}
					var s api.SiteSettings
					if c.IsSet("min") {
						s.MinNodes = ptrTo(c.Int("min"))
					}
					if c.IsSet("max") {
						s.MaxNodes = ptrTo(c.Int("max"))
					}
					if c.Bool("pause") || c.Bool("resume") {
						s.Paused = ptrTo(c.Bool("pause"))
					}
					st, err := cl.SetSite(c.Context, a.pos[0], s)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, st)
					}
					return printSites(c, api.SiteList{Sites: []api.Site{st}})
				}),
			},
		},
	}
}

// sitesCommand lists the sites with their figures.
func sitesCommand() *cli.Command {
	return &cli.Command{
		Name:  "sites",
		Usage: "list the sites sharing the queue: alive, weight, share of the backlog, caps, yield",
		Description: "WEIGHT follows from each site's turnaround against the others' on the same jobs (RELATIVE:\n" +
			"1 = average): the fastest x4, the slowest /2, those faster than average x2. SHARE is the\n" +
			"waiting tasks its agent sees; HELD/ALLOW the tasks its pool holds and may hold (- = no limit).",
		Flags: clientFlags(),
		Action: withClient(func(c *cli.Context, cl *client.Client, a args) error {
			l, err := cl.Sites(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, l)
			}
			return printSites(c, l)
		}),
	}
}

func printSites(c *cli.Context, l api.SiteList) error {
	w := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "SITE\tALIVE\tMASTER\tRELATIVE\tWEIGHT\tSHARE\tHELD/ALLOW\tPILOTS\tMAX\tCAPACITY\tDONE\tFAILED\tPILOT-H\tUSEFUL-H")
	for _, s := range l.Sites {
		alive := "no"
		if s.Alive {
			alive = "yes"
		} else if last := max(s.AgentAt, s.MasterAt); last > 0 {
			alive = "no (" + time.Since(time.Unix(last, 0)).Round(time.Second).String() + ")"
		}
		master := "-"
		if s.Master != "" {
			master = fmt.Sprintf("%s (epoch %d)", s.Master, s.Epoch)
		}
		rel := "-"
		if s.RelativeTurnaround > 0 {
			rel = fmt.Sprintf("%.2f", s.RelativeTurnaround)
		}
		allow := "-"
		if s.Allowance >= 0 {
			allow = fmt.Sprint(s.Allowance)
		}
		maxs := "-"
		if s.EffectiveMax > 0 {
			maxs = fmt.Sprint(s.EffectiveMax)
		}
		if s.Paused {
			maxs += " paused"
		}
		capacity := "-"
		if s.CapacityPhase != "" {
			capacity = s.CapacityPhase
			if s.CapacityCap > 0 {
				capacity = fmt.Sprintf("%s %d", s.CapacityPhase, s.CapacityCap)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%g\t%d\t%d/%s\t%d\t%s\t%s\t%d\t%d\t%.2f\t%.2f\n", s.Name, alive, master, rel, s.Weight,
			s.Share, s.Running, allow, s.Held, maxs, capacity, s.Done, s.Failed, s.PilotHours, s.UsefulHours)
	}
	if l.GlobalMaxNodes > 0 {
		fmt.Fprintf(w, "\nat most %d pilots across all sites\n", l.GlobalMaxNodes)
	}
	return w.Flush()
}
