package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/harvest-hpc/harvest/internal/jsonkeys"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/harvest-hpc/harvest/cluster"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/client"
)

func explainCommand() *cli.Command {
	return &cli.Command{
		Name:  "explain",
		Usage: "show why the agent's last rounds decided what they did, from the snapshots it dumped (--dump-snapshots)",
		Description: "Reads snapshot-*.json and the .decision.json next to each (written by `harvest agent\n" +
			"--dump-snapshots DIR`) and prints one line per round: when, the policy case, the figures it\n" +
			"decided on (idle nodes I, nodes held by pilots R, MiniNode, the top waiting job and the time\n" +
			"until it can start), what it did, and why. Replay any round with\n" +
			"`harvest decide --snapshot FILE --context FILE.context.json`.\n\n" +
			"Without --dir, the directory is found by itself: the running agent tells it (over --queue,\n" +
			"as an admin: root on the socket), else the agent's config file (--config) names it, else\n" +
			"/var/lib/harvest/snapshots is used if it exists.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", EnvVars: []string{"HARVEST_DUMP_SNAPSHOTS"}, Usage: "the agent's --dump-snapshots `DIR` (default: found by itself, see above)"},
			&cli.StringFlag{Name: "queue", EnvVars: []string{"HARVEST_QUEUE"}, Value: "unix://" + api.DefaultSocket, Usage: "the running agent's queue `URL`, asked for its dump directory"},
			&cli.StringFlag{Name: "token", Usage: "admin bearer token for an http(s) --queue (default: HARVEST_TOKEN; not needed on the socket as root)"},
			&cli.StringFlag{Name: "config", EnvVars: []string{"HARVEST_CONFIG"}, Value: defaultAgentConfig, Usage: "the agent's YAML config `FILE`, read for its dump-snapshots key when the agent does not answer"},
			&cli.IntFlag{Name: "last", Value: 10, Usage: "show the last `N` rounds"},
			&cli.BoolFlag{Name: "acting", Usage: "only rounds that submitted or released pilots"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON lines instead of a table"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("last") <= 0 {
				return cli.Exit("harvest explain: --last must be positive", 2)
			}
			dir, err := dumpDir(c)
			if err != nil {
				return cli.Exit("harvest explain: "+err.Error(), 1)
			}
			rounds, err := readRounds(dir, c.Int("last"), c.Bool("acting"))
			if err != nil {
				return cli.Exit("harvest explain: "+err.Error(), 1)
			}
			if len(rounds) == 0 {
				what := "rounds"
				if c.Bool("acting") {
					what = "rounds that acted"
				}
				return cli.Exit(fmt.Sprintf("harvest explain: no dumped %s in %s (is the agent run with --dump-snapshots %s?)", what, dir, dir), 1)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				for _, r := range rounds {
					if err := enc.Encode(r); err != nil {
						return err
					}
				}
				return nil
			}
			return printRounds(c.App.Writer, rounds)
		},
	}
}

const defaultAgentConfig = "/etc/harvest/agent.yaml"

// defaultDumpDir is where the packaged configuration dumps rounds (a
// variable so that tests can point it elsewhere).
var defaultDumpDir = "/var/lib/harvest/snapshots"

// dumpDir finds the agent's dump directory: --dir; else what the running
// agent answers; else its config file's dump-snapshots key; else the
// default directory if it exists. Otherwise the error says what was tried
// and what to pass.
func dumpDir(c *cli.Context) (string, error) {
	if c.IsSet("dir") {
		return c.String("dir"), nil
	}
	var tried []string
	cfg := client.DefaultConfig()
	cfg.URL, cfg.Token, cfg.RetryFor, cfg.Timeout = c.String("queue"), c.String("token"), 0, 5*time.Second
	if cfg.Token == "" {
		cfg.Token = os.Getenv("HARVEST_TOKEN")
	}
	cl, err := client.New(cfg)
	if err == nil {
		var info api.AgentInfo
		if info, err = cl.Agent(c.Context); err == nil {
			if info.DumpDir == "" {
				return "", fmt.Errorf("the agent at %s runs without --dump-snapshots, so it keeps no rounds: "+
					"set dump-snapshots (e.g. %s) in its configuration and restart it", cfg.URL, defaultDumpDir)
			}
			return info.DumpDir, nil
		}
	}
	tried = append(tried, fmt.Sprintf("the agent at %s did not tell (%v)", cfg.URL, err))
	if dir, err := configDumpDir(c.String("config")); err != nil {
		tried = append(tried, err.Error())
	} else {
		return dir, nil
	}
	if _, err := os.Stat(defaultDumpDir); err == nil {
		return defaultDumpDir, nil
	}
	tried = append(tried, defaultDumpDir+" does not exist")
	return "", fmt.Errorf("cannot find the agent's dump directory: %s. Pass --dir DIR (the agent's --dump-snapshots DIR), "+
		"or --queue URL of the running agent, or --config FILE of its configuration", strings.Join(tried, "; "))
}

// configDumpDir reads the dump-snapshots key of the agent's YAML config.
func configDumpDir(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("no config file %s", path)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("%s is not YAML: %v", path, err)
	}
	dir, _ := m["dump-snapshots"].(string)
	if dir == "" {
		return "", fmt.Errorf("%s sets no dump-snapshots", path)
	}
	return dir, nil
}

// explained is one dumped round, summarised.
type explained struct {
	File     string        `json:"file"`
	Now      int64         `json:"now"`
	Case     policy.Case   `json:"case"`
	Idle     int           `json:"idle"`
	Held     int           `json:"held"`
	MinNodes int           `json:"min_nodes"`
	Total    int           `json:"total_nodes"`
	TopJob   string        `json:"top_job,omitempty"`
	MaxTime  cluster.Limit `json:"max_time_s"`
	Action   string        `json:"action"`
	Reason   string        `json:"reason"`
}

// readRounds reads the last n dumped rounds in the order they ran (the
// file names sort that way), skipping files being written.
func readRounds(dir string, n int, acting bool) ([]explained, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "snapshot-*.decision.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []explained
	// Walk back from the newest so --acting finds n acting rounds.
	for i := len(files) - 1; i >= 0 && len(out) < n; i-- {
		r, err := readRound(files[i])
		if errors.Is(err, os.ErrNotExist) {
			continue // pruned by the agent meanwhile
		}
		if err != nil {
			return nil, err
		}
		if acting && r.Action == "nothing" {
			continue
		}
		out = append(out, r)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

func readRound(decisionFile string) (explained, error) {
	var d policy.Decision
	if err := readJSONFile(decisionFile, &d); err != nil {
		return explained{}, err
	}
	snapFile := strings.TrimSuffix(decisionFile, ".decision.json") + ".json"
	var s cluster.Snapshot
	if err := readJSONFile(snapFile, &s); err != nil {
		return explained{}, err
	}
	r := explained{File: filepath.Base(snapFile), Now: s.Now, Case: d.Case, Idle: d.Idle, Held: d.Held, MinNodes: d.MinNodes,
		Total: s.TotalNodes, TopJob: d.TopJob, MaxTime: d.MaxTime, Reason: d.Reason, Action: "nothing"}
	switch {
	case d.Submit != nil:
		r.Action = fmt.Sprintf("submit %d (limit %s)", d.Submit.Count, limitShort(d.Submit.TimeLimit))
	case len(d.Release) > 0:
		r.Action = fmt.Sprintf("release %d (%s)", len(d.Release), strings.Join(d.Release, ","))
	}
	return r, nil
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// Fields a newer agent added may be there; null for a value may not.
	if err := jsonkeys.For(reflect.TypeOf(v).Elem(), true).Check(b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func limitShort(l cluster.Limit) string {
	if l.IsUnlimited() {
		return "unlimited"
	}
	return (time.Duration(l) * time.Second).String()
}

func printRounds(w io.Writer, rounds []explained) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME (UTC)\tCASE\tIDLE\tHELD\tMIN\tTOP JOB\tMAX TIME\tACTION\tREASON")
	for _, r := range rounds {
		top, mt := "-", "-"
		if r.TopJob != "" {
			top, mt = r.TopJob, limitShort(r.MaxTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", time.Unix(r.Now, 0).UTC().Format("2006-01-02 15:04:05"),
			r.Case, r.Idle, r.Held, r.MinNodes, top, mt, r.Action, r.Reason)
	}
	return tw.Flush()
}
