package queue

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/store"
)

// Placeholders a command may use; anything else in braces is rejected so
// a typo fails at submit instead of on every node.
var (
	placeholderRE = regexp.MustCompile(`\{[^{}]*\}`)
	placeholders  = map[string]bool{"{input}": true, "{output}": true, "{job}": true, "{task}": true}
)

// normalized is a validated job spec with the defaults filled in.
type normalized struct {
	name        string
	dataset     string // symlinks resolved
	output      string // "" = the default
	command     []string
	batchSize   int
	price       float64
	cores       int
	maxAttempts int
	timeoutS    int64
	expiry      time.Duration
}

// validateSpec checks everything that needs no file system access.
func (q *Queue) validateSpec(s api.JobSpec) (normalized, error) {
	n := normalized{name: s.Name, batchSize: s.BatchSize, price: 1, cores: 1, maxAttempts: q.cfg.DefaultMaxAttempts, timeoutS: s.TimeoutS, expiry: q.cfg.DefaultExpiry}
	if len(s.Name) > 200 || strings.ContainsAny(s.Name, "\x00\n") {
		return n, invalid("name must be at most 200 characters on one line")
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return n, invalid("command must be a non-empty argv (the program first)")
	}
	if len(s.Command) > 4096 {
		return n, invalid("command has %d arguments, at most 4096", len(s.Command))
	}
	for i, a := range s.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return n, invalid("command argument %d contains a NUL byte", i)
		}
		for _, ph := range placeholderRE.FindAllString(a, -1) {
			if !placeholders[ph] {
				return n, invalid("command argument %d: unknown placeholder %s (known: {input} {output} {job} {task})", i, ph)
			}
		}
	}
	n.command = s.Command
	if s.BatchSize < q.cfg.MinBatchSize || s.BatchSize > q.cfg.MaxBatchSize {
		return n, invalid("batch_size %d is outside %d..%d", s.BatchSize, q.cfg.MinBatchSize, q.cfg.MaxBatchSize)
	}
	if s.Price != nil {
		if !(*s.Price > 0) || math.IsInf(*s.Price, 0) {
			return n, invalid("price must be a positive number, got %v", *s.Price)
		}
		n.price = *s.Price
	}
	if s.Cores != nil {
		if *s.Cores < 1 || *s.Cores > 1<<16 {
			return n, invalid("cores must be at least 1, got %d", *s.Cores)
		}
		n.cores = *s.Cores
	}
	if s.MaxAttempts != nil {
		if *s.MaxAttempts < 1 || *s.MaxAttempts > 1000 {
			return n, invalid("max_attempts must be 1..1000, got %d", *s.MaxAttempts)
		}
		n.maxAttempts = *s.MaxAttempts
	}
	if s.TimeoutS < 0 {
		return n, invalid("timeout_s must not be negative, got %d", s.TimeoutS)
	}
	if s.ExpiryS < 0 || s.ExpiryS > 365*24*3600 {
		return n, invalid("expiry_s must be 0 (default) up to a year, got %d", s.ExpiryS)
	}
	if s.ExpiryS > 0 {
		n.expiry = time.Duration(s.ExpiryS) * time.Second
	}
	return n, nil
}

// resolveInRoots resolves p (which must exist) and checks that it lies in
// an allowed root: symlinks cannot escape, ".." cannot traverse.
func (q *Queue) resolveInRoots(what, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", invalid("%s %q is not an absolute path", what, p)
	}
	for _, part := range strings.Split(p, string(filepath.Separator)) {
		if part == ".." {
			return "", invalid("%s %q contains \"..\"", what, p)
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", invalid("%s %s does not exist", what, p)
		}
		return "", invalid("%s %s: %v", what, p, err)
	}
	for _, root := range q.roots {
		rel, err := filepath.Rel(root, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return real, nil
		}
	}
	return "", invalid("%s %s (resolved to %s) is outside the allowed roots %v", what, p, real, q.cfg.AllowedRoots)
}

// listDataset returns the entry names of the dataset directory, sorted;
// hidden entries (".name") are skipped.
func (q *Queue) listDataset(dir string) ([]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, invalid("dataset %s: %v", dir, err)
	}
	if !fi.IsDir() {
		return nil, invalid("dataset %s is not a directory", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, invalid("dataset %s is not readable: %v", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, invalid("dataset %s is not readable: %v", dir, err)
	}
	out := names[:0]
	for _, n := range names {
		if !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, invalid("dataset %s has no entries: nothing to do", dir)
	}
	if len(out) > q.cfg.MaxTasksPerJob {
		return nil, invalid("dataset %s has %d entries, at most %d per job", dir, len(out), q.cfg.MaxTasksPerJob)
	}
	slices.Sort(out)
	return out, nil
}

// resolveOutput checks an explicit output directory: it may not exist yet,
// but its nearest existing ancestor must resolve inside the allowed roots.
func (q *Queue) resolveOutput(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", invalid("output %q is not an absolute path", p)
	}
	for _, part := range strings.Split(p, string(filepath.Separator)) {
		if part == ".." {
			return "", invalid("output %q contains \"..\"", p)
		}
	}
	clean := filepath.Clean(p)
	existing, rest := clean, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		parent := filepath.Dir(existing)
		if parent == existing {
			return "", invalid("output %s has no existing ancestor", p)
		}
		existing = parent
	}
	real, err := q.resolveInRoots("output directory", existing)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", invalid("output %s: %s is not a directory", p, existing)
	}
	return filepath.Join(real, rest), nil
}

// Submit validates a job spec, lists the dataset and stores the job and its
// tasks (in InsertChunk-sized transactions; the job stays invisible until
// the last one commits). Bad input returns api.ErrInvalid and stores nothing.
func (q *Queue) Submit(ctx context.Context, owner string, s api.JobSpec) (api.Job, error) {
	n, err := q.validateSpec(s)
	if err != nil {
		return api.Job{}, err
	}
	if s.Dataset == "" {
		return api.Job{}, invalid("dataset is required")
	}
	if n.dataset, err = q.resolveInRoots("dataset", s.Dataset); err != nil {
		return api.Job{}, err
	}
	if s.Output != "" {
		if n.output, err = q.resolveOutput(s.Output); err != nil {
			return api.Job{}, err
		}
	}
	names, err := q.listDataset(n.dataset)
	if err != nil {
		return api.Job{}, err
	}
	if err := q.ensureUser(ctx, owner); err != nil {
		return api.Job{}, err
	}
	now := q.now()
	id, err := q.st.CreateJob(ctx, store.NewJob{
		Owner: owner, Name: n.name, Dataset: n.dataset, Command: n.command, BatchSize: n.batchSize, Price: n.price,
		Cores: n.cores, MaxAttempts: n.maxAttempts, TimeoutS: n.timeoutS, Submitted: now, Expires: now.Add(n.expiry),
	})
	if err != nil {
		return api.Job{}, err
	}
	out := n.output
	if out == "" {
		if q.cfg.OutputsRoot != "" {
			out = filepath.Join(q.cfg.OutputsRoot, owner, fmt.Sprintf("job-%d", id))
		} else {
			out = fmt.Sprintf("%s.out-%d", n.dataset, id)
		}
	}
	if err := q.st.InsertTasks(ctx, id, names, now, q.cfg.InsertChunk); err != nil {
		q.dropJob(id)
		return api.Job{}, err
	}
	q.mu.Lock()
	err = q.st.ActivateJob(ctx, id, out, len(names))
	if err == nil {
		j := &liveJob{store.ReadyJob{ID: id, Owner: owner, Dataset: n.dataset, OutputDir: out, Command: n.command, Price: n.price,
			Cores: n.cores, BatchSize: n.batchSize, TimeoutS: n.timeoutS, Waiting: len(names)}}
		q.jobs[id] = j
		q.listLocked(j)
	}
	q.mu.Unlock()
	if err != nil {
		q.dropJob(id)
		return api.Job{}, err
	}
	q.log.Info("job submitted", "job", id, "owner", owner, "tasks", len(names), "batch_size", n.batchSize)
	return q.Job(ctx, owner, true, id)
}

// dropJob removes a job whose submission failed half way (a fresh
// context: the caller's may be what failed).
func (q *Queue) dropJob(id int64) {
	if err := q.st.DropJob(context.Background(), id, q.cfg.InsertChunk); err != nil {
		q.log.Error("could not remove a half-submitted job; it is removed at the next start", "job", id, "error", err)
	}
}

// cleanupPartialSubmits removes jobs whose submission died half way.
func (q *Queue) cleanupPartialSubmits(ctx context.Context) error {
	ids, err := q.st.SubmittingJobs(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		q.log.Warn("removing a job whose submission was interrupted", "job", id)
		if err := q.st.DropJob(ctx, id, q.cfg.InsertChunk); err != nil {
			return err
		}
	}
	return nil
}
