// Command multisite measures one harvest spread over two real SLURM
// mini-clusters (scripts/minicluster.sh): one queue, hosted by site a's
// agent, and site b's agent using it with an agent token. Each scenario
// runs one user's job on a fresh queue and prints where its tasks ran,
// its makespan, the pilots, and the tasks lost and run twice (counted by
// the tasks themselves, in a ledger):
//
//	alone       site a only (the reference makespan)
//	spread      both sites, equal tasks
//	slow        both sites, tasks three times longer at b: the queue weights b down
//	contention  site a only, tasks that read a file from a shared server that
//	            serves 4 readers at full speed: without, then with, the
//	            capacity rule (pilots and task run times)
//	failover    (not in the default list) both sites' agents serve one
//	            database (--db, --peer); carol submits through a's agent,
//	            a's agent is killed with SIGKILL mid-run, a's pilots go on
//	            through b's agent, carol submits and watches through b
//
// Run as root from the repository root (scripts/multisite.sh takes the
// clusters' test locks):
//
//	LAB=... CTLD_PORT=... PORT_BASE=... LAB_B=... CTLD_PORT_B=... PORT_BASE_B=... go run ./scripts/multisite
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

var (
	scenarios = flag.String("scenario", "alone,spread,slow,contention", "scenarios to run, comma-separated")
	nodes     = flag.Int("nodes", 8, "nodes of each mini-cluster")
	tasks     = flag.Int("tasks", 240, "tasks of the job (spread, slow, alone)")
	taskTime  = flag.Duration("task-time", 2*time.Second, "run time of a task (at b in slow: x -slow)")
	slow      = flag.Int("slow", 3, "how many times longer tasks run at site b in the slow scenario")
	cTasks    = flag.Int("contention-tasks", 200, "tasks of the contention scenario")
	port      = flag.Int("port", 18702, "queue TCP port on 127.0.0.1")
	filePort  = flag.Int("file-port", 18703, "the contended file server's port on 127.0.0.1")
	bin       = flag.String("harvest", "", "harvest binary (default: build it)")
	keep      = flag.Bool("keep", false, "keep the work directory")
	db        = flag.String("db", "", "the failover scenario's shared database: a postgres:// URL (default: a SQLite file in the work directory)")
)

// env is a LAB-style variable with a default.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "multisite:", err)
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Printf("[multisite %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func run() error {
	if os.Getuid() != 0 {
		return errors.New("run as root (it starts SLURM daemons and agents, and submits as carol)")
	}
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	labA := env("LAB", "/var/tmp/harvest-slurm")
	ctld, _ := strconv.Atoi(env("CTLD_PORT", "6817"))
	base, _ := strconv.Atoi(env("PORT_BASE", "17000"))
	labB := env("LAB_B", labA+"-b")
	ctldB, baseB := env("CTLD_PORT_B", strconv.Itoa(ctld+100)), env("PORT_BASE_B", strconv.Itoa(base+100))
	starts := []struct{ dir, ctld, base string }{{labA, strconv.Itoa(ctld), strconv.Itoa(base)}, {labB, ctldB, baseB}}
	for _, l := range starts {
		c := exec.Command(filepath.Join(repo, "scripts", "minicluster.sh"), "start", strconv.Itoa(*nodes))
		c.Env = append(os.Environ(), "LAB="+l.dir, "CTLD_PORT="+l.ctld, "PORT_BASE="+l.base, "LINK_ETC=0",
			"SLURM_CONF="+filepath.Join(l.dir, "etc", "slurm.conf"))
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("start the cluster %s: %w\n%s", l.dir, err, out)
		}
	}
	if out, err := exec.Command(filepath.Join(repo, "scripts", "minicluster.sh"), "users", "carol").CombinedOutput(); err != nil {
		return fmt.Errorf("users: %w\n%s", err, out)
	}
	a := lab{site: "a", conf: filepath.Join(labA, "etc", "slurm.conf")}
	b := lab{site: "b", conf: filepath.Join(labB, "etc", "slurm.conf")}
	work := filepath.Join(labA, "shared", fmt.Sprintf("multisite-%d", time.Now().Unix()))
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(work)
	}
	harvest := *bin
	if harvest == "" {
		harvest = filepath.Join(work, "harvest")
		logf("building harvest")
		if out, err := exec.Command("go", "build", "-o", harvest, "./cmd/harvest").CombinedOutput(); err != nil {
			return fmt.Errorf("build: %w\n%s", err, out)
		}
	}
	ctx := context.Background()
	var report []string
	var alone time.Duration
	for _, sc := range strings.Split(*scenarios, ",") {
		mk := func(name string, labs []lab, pilotArgs string) *setup {
			return &setup{bin: harvest, work: filepath.Join(work, name), port: *port, labs: labs, pilotArgs: pilotArgs}
		}
		sleep := fmt.Sprintf("sleep %.3f", taskTime.Seconds())
		switch sc {
		case "alone", "spread":
			labs := []lab{a, b}
			if sc == "alone" {
				labs = []lab{a}
			}
			o, err := scenario(ctx, mk(sc, labs, ""), *tasks, sleep)
			if err != nil {
				return fmt.Errorf("%s: %w", sc, err)
			}
			line := fmt.Sprintf("%-10s %s", sc, describe(o, *tasks))
			if sc == "alone" {
				alone = o.makespan
			} else if alone > 0 {
				line += fmt.Sprintf("; makespan %.2f x site a alone", o.makespan.Seconds()/alone.Seconds())
			}
			report = append(report, line)
		case "slow":
			work := fmt.Sprintf(`if [ "$HARVEST_SITE" = b ]; then sleep %.3f; else %s; fi`, float64(*slow)*taskTime.Seconds(), sleep)
			o, err := scenario(ctx, mk(sc, []lab{a, b}, ""), *tasks, work)
			if err != nil {
				return fmt.Errorf("%s: %w", sc, err)
			}
			report = append(report, fmt.Sprintf("%-10s %s", sc, describe(o, *tasks)))
		case "contention":
			// 2 MB per task at most 1 MB/s per reader and 4 MB/s in all:
			// 2 s alone, and every reader slows down past 4.
			srv, stop, err := serveContended(*filePort, 2<<20, 4<<20, 1<<20)
			if err != nil {
				return err
			}
			fetch := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf "GET /blob HTTP/1.0\r\n\r\n" >&3 && cat <&3 >/dev/null'`, *filePort)
			for _, v := range []struct{ name, args string }{
				{"contention, no rule", "--capacity-factor 0"},
				{"contention, capacity rule", "--capacity-hold 6"},
			} {
				o, err := scenario(ctx, mk(strings.ReplaceAll(strings.ReplaceAll(v.name, ",", ""), " ", "-"), []lab{a}, v.args), *cTasks, fetch)
				if err != nil {
					stop()
					return fmt.Errorf("%s: %w", v.name, err)
				}
				_, peak, _ := srv.stats()
				report = append(report, fmt.Sprintf("%-10s %s; readers at once at most %d", v.name, describe(o, *cTasks), peak))
			}
			stop()
		case "failover":
			st := mk(sc, []lab{a, b}, "")
			st.shared, st.ports, st.db = true, []int{*port, *port + 2}, *db
			f, err := failover(ctx, st, *tasks, sleep)
			if err != nil {
				return fmt.Errorf("%s: %w", sc, err)
			}
			report = append(report, fmt.Sprintf("%-10s %s", sc, describeFailover(f, *tasks)))
		default:
			return fmt.Errorf("unknown scenario %q", sc)
		}
	}
	fmt.Println("\n================ one harvest on two SLURM clusters ================")
	for _, l := range report {
		fmt.Println(l)
	}
	return nil
}

// scenario runs one job on a fresh queue and agents.
func scenario(ctx context.Context, s *setup, n int, work string) (outcome, error) {
	for _, l := range s.labs {
		l.clean()
	}
	logf("%s: starting the agents of %d site(s)", filepath.Base(s.work), len(s.labs))
	if err := s.start(ctx); err != nil {
		s.stop()
		return outcome{}, err
	}
	defer s.stop()
	ds, err := s.dataset("ds", n)
	if err != nil {
		return outcome{}, err
	}
	id, ledger, err := s.submit(ctx, ds, work)
	if err != nil {
		return outcome{}, err
	}
	logf("%s: carol's job %d of %d tasks submitted", filepath.Base(s.work), id, n)
	o, err := s.wait(ctx, id, n, ledger, 15*time.Minute)
	if err != nil {
		return o, err
	}
	logf("%s: job %d %s after %.1f s", filepath.Base(s.work), id, o.job.State, o.makespan.Seconds())
	return o, nil
}

// describe prints one scenario's figures on one line.
func describe(o outcome, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s in %.1f s (%.2f tasks/s); ran at", o.job.State, o.makespan.Seconds(), float64(n)/o.makespan.Seconds())
	for _, site := range sortedKeys(o.done) {
		mean := 0.0
		for _, x := range o.run[site] {
			mean += x
		}
		if k := len(o.run[site]); k > 0 {
			mean /= float64(k)
		}
		fmt.Fprintf(&b, " %s %d (%.0f%%, run %.2f s)", site, o.done[site], 100*float64(o.done[site])/float64(n), mean)
	}
	for _, st := range o.sites.Sites {
		if st.Done > 0 || st.Held > 0 {
			fmt.Fprintf(&b, "; %s weight %g relative %.2f", st.Name, st.Weight, st.RelativeTurnaround)
			if st.CapacityPhase != "" {
				fmt.Fprintf(&b, " capacity %s %d", st.CapacityPhase, st.CapacityCap)
			}
		}
	}
	fmt.Fprintf(&b, "; the queue says")
	for _, js := range o.job.Sites {
		fmt.Fprintf(&b, " %s %d", js.Site, js.Done)
	}
	for _, site := range sortedKeys(o.pilots) {
		m, mx := meanMax(o.pilots[site])
		fmt.Fprintf(&b, "; pilots at %s mean %.1f max %d", site, m, mx)
	}
	fmt.Fprintf(&b, "; lost %d, run twice %d", o.lost, o.dup)
	return b.String()
}
