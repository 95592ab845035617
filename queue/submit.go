package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/harvest-hpc/harvest/internal/safefs"
	"github.com/harvest-hpc/harvest/internal/unixacct"
	"github.com/harvest-hpc/harvest/pilotproto"
	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/rules"
	"github.com/harvest-hpc/harvest/queue/store"
)

// Placeholders a command may use; anything else in braces is rejected so
// a typo fails at submit instead of on every node.
var (
	placeholderRE = regexp.MustCompile(`\{[^{}]*\}`)
	placeholders  = map[string]bool{"{input}": true, "{output}": true, "{job}": true, "{task}": true,
		pilotproto.PlaceholderInputs: true, pilotproto.PlaceholderOutputs: true}
)

// Bounds of a job's figures.
const (
	MaxPrice = 1e6
	MaxCores = 1 << 16
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
	if !utf8.ValidString(s.Name) || utf8.RuneCountInString(s.Name) > 200 || strings.IndexFunc(s.Name, unprintable) >= 0 {
		// Control, format and separator characters too: names are printed
		// to other users' terminals (harvest jobs for admins), where an
		// escape sequence acts and U+202E reverses what follows.
		return n, invalid("name must be valid UTF-8, at most 200 characters on one line, without control characters, format characters or line/paragraph separators (U+202E, U+200B, U+2028...)")
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
		if !utf8.ValidString(a) {
			return n, invalid("command argument %d is not valid UTF-8", i)
		}
		for _, ph := range placeholderRE.FindAllString(a, -1) {
			if !placeholders[ph] {
				return n, invalid("command argument %d: unknown placeholder %s (known: {input} {output} {job} {task}; batched: {inputs} {outputs} {job})", i, ph)
			}
		}
	}
	if err := validateBatched(s.Command); err != nil {
		return n, err
	}
	n.command = s.Command
	if s.BatchSize < q.cfg.MinBatchSize || s.BatchSize > q.cfg.MaxBatchSize {
		return n, invalid("batch_size %d is outside %d..%d", s.BatchSize, q.cfg.MinBatchSize, q.cfg.MaxBatchSize)
	}
	if pilotproto.Batched(s.Command) && s.BatchSize > pilotproto.MaxBatchedEntries {
		return n, invalid("batch_size %d: a batched command ({inputs}) takes at most %d entries per run", s.BatchSize, pilotproto.MaxBatchedEntries)
	}
	if s.Price != nil {
		// Bounded, so that a task's cost (cores x seconds x price) and a
		// user's sums stay finite (issue 13 item 6: 1e308 made them +Inf).
		if !(*s.Price > 0) || *s.Price > MaxPrice {
			return n, invalid("price must be a number in (0, %g], got %v", MaxPrice, *s.Price)
		}
		n.price = *s.Price
	}
	if s.Cores != nil {
		if *s.Cores < 1 || *s.Cores > MaxCores {
			return n, invalid("cores must be 1..%d, got %d", MaxCores, *s.Cores)
		}
		n.cores = *s.Cores
	}
	if s.MaxAttempts != nil {
		if *s.MaxAttempts < 1 || *s.MaxAttempts > 1000 {
			return n, invalid("max_attempts must be 1..1000, got %d", *s.MaxAttempts)
		}
		n.maxAttempts = *s.MaxAttempts
	}
	if s.TimeoutS < 0 || s.TimeoutS > api.MaxTimeoutS {
		// 1e10 s overflowed time.Duration in the worker: every task killed at once.
		return n, invalid("timeout_s must be 0 (none) up to %d (a year), got %d", api.MaxTimeoutS, s.TimeoutS)
	}
	if s.ExpiryS < 0 || s.ExpiryS > 365*24*3600 {
		return n, invalid("expiry_s must be 0 (default) up to a year, got %d", s.ExpiryS)
	}
	if s.ExpiryS > 0 {
		n.expiry = time.Duration(s.ExpiryS) * time.Second
	}
	return n, nil
}

// validateBatched checks the placeholders of a batched command (one that
// holds {inputs}): {inputs} and {outputs} are whole arguments, at most
// once each, {outputs} only with {inputs}, and the one-task placeholders
// {input} {output} {task} are not used with them.
func validateBatched(argv []string) error {
	count := map[string]int{}
	for i, a := range argv {
		for _, ph := range placeholderRE.FindAllString(a, -1) {
			count[ph]++
			if (ph == pilotproto.PlaceholderInputs || ph == pilotproto.PlaceholderOutputs) && a != ph {
				return invalid("command argument %d: %s must be a whole argument (it stands for one argument per entry of the batch)", i, ph)
			}
		}
	}
	switch {
	case count[pilotproto.PlaceholderInputs] == 0 && count[pilotproto.PlaceholderOutputs] > 0:
		return invalid("command: {outputs} is for a batched command, which takes its entries with {inputs}")
	case count[pilotproto.PlaceholderInputs] == 0:
		return nil
	case count[pilotproto.PlaceholderInputs] > 1 || count[pilotproto.PlaceholderOutputs] > 1:
		return invalid("command: {inputs} and {outputs} may each appear once")
	}
	for _, ph := range []string{"{input}", "{output}", "{task}"} {
		if count[ph] > 0 {
			return invalid("command: %s names one task; a batched command ({inputs}) runs once per batch: use {inputs} and {outputs}", ph)
		}
	}
	return nil
}

// unprintable is what a job name may not hold: control characters,
// format characters (bidirectional overrides, zero-width spaces) and the
// line and paragraph separators.
func unprintable(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// resolveInRoots resolves p (which must exist) and checks that it lies in
// an allowed root: symlinks cannot escape, ".." cannot traverse.
func (q *Queue) resolveInRoots(what, p string) (string, error) {
	if err := pathLength(what, p); err != nil {
		return "", err
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", invalid("%s %q contains a NUL byte", what, p)
	}
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

// maxPath is the longest path the kernel takes (PATH_MAX, with its NUL).
const maxPath = 4095

// pathLength refuses a path longer than the kernel takes, quoting only
// its start: an output of 200,000 components kept a submission busy for
// over ten minutes (each missing component joined onto the rest again)
// and made as many nested directories, and refusals quoted it whole.
func pathLength(what, p string) error {
	if len(p) > maxPath {
		return invalid("%s %.80q... is %d bytes long: a path is at most 4096 bytes, its final NUL included (PATH_MAX)", what, p, len(p))
	}
	return nil
}

// readableBy checks that owner's Unix account may read the dataset dir
// (resolved): search permission on every directory from / down, read and
// search on dir, by the mode bits (ACLs are not consulted). The queue,
// like the harvest account that runs the tasks, reads every user's data:
// without this, bob submitted alice's private dataset and got its entries
// back through his command's outputs and error tails. Root reads
// everything; an owner without a Unix account (only an admin makes a
// token for one) is trusted with what the harvest account reads.
func (q *Queue) readableBy(owner, dir string) error {
	return q.mayRead(owner, dir, "dataset "+dir)
}

// mayRead is readableBy for any path (a directory: list and read; a
// file: read), what naming it in the refusal. The worker checks a linked
// entry again when its task starts (worker.ExecRunner.LookupAccount).
func (q *Queue) mayRead(owner, path, what string) error {
	a, err := q.cfg.LookupAccount(owner)
	if err != nil || a.UID == 0 {
		return nil
	}
	err = a.MayRead(path)
	var d *unixacct.Denied
	if errors.As(err, &d) {
		return fmt.Errorf("%w: %s: the account of %s %v; submit a dataset your own account can read", api.ErrForbidden, what, owner, d)
	}
	if err != nil {
		return invalid("%s: %v", what, err)
	}
	return nil
}

// listDataset returns the entry names of the dataset directory, sorted;
// hidden entries (".name") are skipped. listed hears how many entries
// were read so far. Names must be valid UTF-8 (they travel as JSON text;
// others were mangled on the way and the task failed every attempt), and
// an entry that is a symbolic link must resolve inside the allowed roots
// (issue 13 item 4: "shadow -> /etc/shadow" became a task's input) to
// something owner's account may read (a link to another user's file
// would hand it to owner's command as its input).
//
// dir was resolved and checked before; it is opened without following
// any link, so a directory swapped for a link to elsewhere since (the
// user owns the dataset's parent) is refused, not listed.
func (q *Queue) listDataset(owner, dir string, listed func(int)) ([]string, error) {
	d, err := safefs.OpenDir(dir)
	switch {
	case errors.Is(err, safefs.ErrLink):
		return nil, invalid("dataset %s: a symbolic link is on its path since it was checked: submit it again", dir)
	case errors.Is(err, syscall.ENOTDIR):
		return nil, invalid("dataset %s is not a directory", dir)
	case err != nil:
		return nil, invalid("dataset %s: %v", dir, err)
	}
	defer d.Close()
	q.hook("list-opened")
	f, err := os.Open(safefs.FDPath(d)) // the very directory opened above
	if err != nil {
		return nil, invalid("dataset %s is not readable: %v", dir, err)
	}
	defer f.Close()
	var out []string
	for {
		entries, err := f.ReadDir(8192)
		for _, e := range entries {
			n := e.Name()
			if strings.HasPrefix(n, ".") {
				continue
			}
			if !utf8.ValidString(n) {
				return nil, invalid("dataset %s: entry %q is not valid UTF-8: rename it", dir, n)
			}
			if e.Type()&fs.ModeSymlink != 0 {
				// Through the directory opened, not its path: what is
				// at the path now may be another directory.
				real, err := filepath.EvalSymlinks(filepath.Join(safefs.FDPath(d), n))
				if err != nil {
					return nil, invalid("dataset %s: entry %s is a link that does not resolve: %v", dir, n, err)
				}
				if !within(real, q.roots) {
					return nil, invalid("dataset %s: entry %s is a link to %s, outside the allowed roots %v", dir, n, real, q.cfg.AllowedRoots)
				}
				if err := q.mayRead(owner, real, fmt.Sprintf("dataset %s: entry %s links to %s", dir, n, real)); err != nil {
					return nil, err
				}
			}
			out = append(out, n)
		}
		if len(out) > q.cfg.MaxTasksPerJob {
			return nil, invalid("dataset %s has more than %d entries, the most a job may have", dir, q.cfg.MaxTasksPerJob)
		}
		listed(len(out))
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, invalid("dataset %s is not readable: %v", dir, err)
		}
	}
	if len(out) == 0 {
		return nil, invalid("dataset %s has no entries: nothing to do", dir)
	}
	slices.Sort(out)
	return out, nil
}

// within reports whether the clean absolute path p is one of dirs or
// beneath one.
func within(p string, dirs []string) bool {
	for _, root := range dirs {
		rel, err := filepath.Rel(root, p)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// ownOutput checks that an output directory a job names is its owner's
// (issue 13 item 5: bob could name alice's results): the directory, or
// where it does not exist yet its nearest existing ancestor, must belong
// to the owner's Unix account.
func (q *Queue) ownOutput(owner, p string) error {
	a, err := q.cfg.LookupAccount(owner)
	uid := a.UID
	if err != nil {
		return fmt.Errorf("%w: output %s: %s has no Unix account to own it (%v); leave output out for a fresh directory", api.ErrForbidden, p, owner, err)
	}
	existing := p
	for {
		fi, err := os.Lstat(existing)
		if err == nil {
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return fmt.Errorf("%w: output %s: cannot tell who owns %s", api.ErrForbidden, p, existing)
			}
			if st.Uid != uid {
				return fmt.Errorf("%w: output %s: %s is owned by uid %d, not by %s (uid %d)", api.ErrForbidden, p, existing, st.Uid, owner, uid)
			}
			return nil
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return invalid("output %s has no existing ancestor", p)
		}
		existing = parent
	}
}

// maxOutputSuffix bounds the names tried for a default output directory
// whose plain name exists: out, out.2, ... out.<maxOutputSuffix>.
const maxOutputSuffix = 100

// makeOutput creates the job's output directory before any task runs,
// without following links, and returns it: a named one (already checked
// to be the owner's) with its missing parents; a default one fresh. The
// default name may exist already (a queue reset or restored backup
// reusing ids, another queue on the same dataset): that directory is not
// the job's, and it is the queue's name to choose, so the next free one
// (out.2, out.3, ...) is taken rather than failing the submission, which
// would use up a job id at every retry.
func makeOutput(out string, fresh bool) (string, error) {
	if !fresh {
		d, err := safefs.MkdirAll(out, 0o755)
		if err != nil {
			return "", invalid("cannot create the output directory %s (the harvest account must be able to, and no link may lead there): %v", out, err)
		}
		d.Close()
		return out, nil
	}
	try := out
	for k := 2; ; k++ {
		err := safefs.MkdirFresh(try, 0o755)
		if err == nil {
			return try, nil
		}
		if !errors.Is(err, fs.ErrExist) || k > maxOutputSuffix {
			return "", invalid("cannot create the default output directory %s (the harvest account must be able to, and no link may lead there): %v", try, err)
		}
		try = fmt.Sprintf("%s.%d", out, k)
	}
}

// resolveOutput checks an explicit output directory: it may not exist yet,
// but its nearest existing ancestor must resolve inside the allowed roots.
func (q *Queue) resolveOutput(p string) (string, error) {
	if err := pathLength("output", p); err != nil {
		return "", err
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", invalid("output %q contains a NUL byte", p)
	}
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

// Submission is a submission being stored away from its caller (or
// stored): its progress while the dataset is listed and its tasks
// inserted, then the job or the error.
type Submission struct {
	done     chan struct{}
	hash     string // digest of the request, for its idempotency key
	job      api.Job
	err      error
	replayed bool
	storing  atomic.Bool
	entries  atomic.Int64
	stored   atomic.Int64
}

// Done is closed when the submission has ended.
func (s *Submission) Done() <-chan struct{} { return s.done }

// Result is the job, or why there is none (api.ErrInvalid for a dataset
// that cannot be submitted: nothing is stored then). Valid after Done.
func (s *Submission) Result() (api.Job, error) { return s.job, s.err }

// Replayed reports whether the submission is an earlier one with the
// same idempotency key.
func (s *Submission) Replayed() bool { return s.replayed }

// Progress is how far the submission is.
func (s *Submission) Progress() api.SubmitProgress {
	p := api.SubmitProgress{Phase: api.PhaseListing, Entries: int(s.entries.Load()), Stored: int(s.stored.Load())}
	if s.storing.Load() {
		p.Phase = api.PhaseStoring
	}
	return p
}

type submitKey struct{ owner, key string }

// Submit submits a job and waits for it: StartSubmit without an
// idempotency key. If ctx ends first, the submission goes on without a
// waiter.
func (q *Queue) Submit(ctx context.Context, owner string, s api.JobSpec) (api.Job, error) {
	sub, err := q.StartSubmit(ctx, owner, s, "")
	if err != nil {
		return api.Job{}, err
	}
	select {
	case <-sub.Done():
		return sub.Result()
	case <-ctx.Done():
		return api.Job{}, ctx.Err()
	}
}

// StartSubmit validates a job spec and starts storing the job away from
// the caller: listing the dataset and inserting its tasks (in
// transactions of at most InsertChunk tasks, each sized to about 1 ms of
// the write lock; the job stays invisible until the last
// one commits, and a submission cut by a crash is removed at the next
// start), so a caller that goes away does not lose it. Bad input returns
// api.ErrInvalid and stores nothing.
//
// With an idempotency key, a submission of the same owner and key gets
// the first one instead: while it is stored, the same Submission (its
// progress, then its result); afterwards, its job, replayed. The same key
// with another spec is api.ErrConflict.
func (q *Queue) StartSubmit(ctx context.Context, owner string, s api.JobSpec, key string) (*Submission, error) {
	n, err := q.validateSpec(s)
	if err != nil {
		return nil, err
	}
	if len(key) > api.MaxIdempotencyKey || strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return nil, invalid("the idempotency key must be at most %d printable ASCII characters", api.MaxIdempotencyKey)
	}
	if s.Dataset == "" {
		return nil, invalid("dataset is required")
	}
	if n.dataset, err = q.resolveInRoots("dataset", s.Dataset); err != nil {
		return nil, err
	}
	if err := q.readableBy(owner, n.dataset); err != nil {
		return nil, err
	}
	if s.Output != "" {
		if n.output, err = q.resolveOutput(s.Output); err != nil {
			return nil, err
		}
		if safefs.Within(n.output, []string{n.dataset}) {
			// OUTPUT/name would be the task's own input, or a path in
			// another entry, and a new directory there a new entry.
			return nil, invalid("output %s is inside the dataset %s (resolved: %s): each task's output would be written among the inputs; give a directory outside it", s.Output, s.Dataset, n.output)
		}
		if err := q.ownOutput(owner, n.output); err != nil {
			return nil, err
		}
	}
	if err := validUserName(owner); err != nil {
		return nil, err
	}
	sub := &Submission{done: make(chan struct{}), hash: specHash(s)}
	k := submitKey{owner, key}
	var stale int64 // a job a dead agent left SUBMITTING under the key
	if key != "" {
		q.submitMu.Lock()
		defer q.submitMu.Unlock()
		if cur := q.submits[k]; cur != nil {
			if cur.hash != sub.hash {
				return nil, fmt.Errorf("%w: idempotency key %q was used for another submission", api.ErrConflict, key)
			}
			return cur, nil
		}
		id, hash, state, ok, err := q.st.JobByKey(ctx, owner, key)
		if err != nil {
			return nil, err
		}
		if ok {
			if hash != sub.hash {
				return nil, fmt.Errorf("%w: idempotency key %q was used for another submission (job %d)", api.ErrConflict, key, id)
			}
			if state == rules.JobSubmitting { // another agent of this database is storing it
				took, err := q.takeOver(ctx, id)
				if err != nil {
					return nil, err
				}
				if !took {
					return nil, fmt.Errorf("%w: the submission with idempotency key %q is being stored", api.ErrConflict, key)
				}
				stale = id
			} else {
				sub.job, sub.err = q.Job(ctx, owner, true, id)
				sub.replayed = true
				close(sub.done)
				return sub, nil
			}
		}
		q.submits[k] = sub
	}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		if stale != 0 {
			q.dropJob(stale) // the dead agent's half-stored job, its key taken over
		}
		job, err := q.store(q.bg, sub, owner, n, key)
		sub.job, sub.err = job, err
		if key != "" {
			q.submitMu.Lock()
			delete(q.submits, k)
			q.submitMu.Unlock()
		}
		close(sub.done)
	}()
	return sub, nil
}

// checkUnfinished refuses a job of n tasks that would take owner past
// MaxUnfinishedPerUser unfinished tasks. Submissions of one user under way
// at once are counted once they are stored, so together they may pass the
// cap by what they bring (each at most MaxTasksPerJob).
func (q *Queue) checkUnfinished(ctx context.Context, owner string, n int) error {
	limit := q.cfg.MaxUnfinishedPerUser
	if limit <= 0 {
		return nil
	}
	have, err := q.st.UnfinishedOf(ctx, owner)
	if err != nil {
		return err
	}
	if have+n > limit {
		return fmt.Errorf("%w: %s has %d unfinished tasks; this job's %d would pass the queue's cap of %d per user (--max-unfinished-tasks-per-user): wait for some to finish, or cancel a job",
			api.ErrConflict, owner, have, n, limit)
	}
	return nil
}

// store lists the dataset and stores the job and its tasks.
func (q *Queue) store(ctx context.Context, sub *Submission, owner string, n normalized, key string) (api.Job, error) {
	q.hook("list")
	names, err := q.listDataset(owner, n.dataset, func(k int) { sub.entries.Store(int64(k)) })
	if err != nil {
		return api.Job{}, err
	}
	if err := q.checkUnfinished(ctx, owner, len(names)); err != nil {
		return api.Job{}, err
	}
	sub.storing.Store(true)
	q.hook("store")
	if err := q.ensureUser(ctx, owner); err != nil {
		return api.Job{}, err
	}
	now := q.now()
	id, err := q.st.CreateJob(ctx, store.NewJob{
		Owner: owner, Name: n.name, Dataset: n.dataset, Command: n.command, BatchSize: n.batchSize, Price: n.price,
		Cores: n.cores, MaxAttempts: n.maxAttempts, TimeoutS: n.timeoutS, Submitted: now, Expires: now.Add(n.expiry),
		IdemKey: key, IdemHash: sub.hash,
	})
	if err != nil {
		return api.Job{}, err
	}
	q.hook("created")
	out := n.output
	if out == "" {
		if q.cfg.OutputsRoot != "" {
			out = filepath.Join(q.cfg.OutputsRoot, owner, fmt.Sprintf("job-%d", id))
		} else {
			out = fmt.Sprintf("%s.out-%d", n.dataset, id)
		}
	}
	if out, err = makeOutput(out, n.output == ""); err != nil {
		q.dropJob(id)
		return api.Job{}, err
	}
	if err := q.st.InsertTasks(ctx, id, names, q.cfg.InsertChunk, func(k int) { sub.stored.Add(int64(k)) }); err != nil {
		q.dropJob(id)
		return api.Job{}, err
	}
	q.mu.Lock()
	err = q.st.ActivateJob(ctx, id, out, len(names))
	if err == nil {
		j := &liveJob{ID: id, Owner: owner, Dataset: n.dataset, OutputDir: out, Command: n.command, Price: n.price,
			Cores: n.cores, BatchSize: n.batchSize, TimeoutS: n.timeoutS, Waiting: len(names)}
		if len(q.jobs) == 0 {
			// Work arrives at an idle queue: the hosting agent rounds
			// now, not up to a poll later (its round may have read the
			// queue just before this job).
			q.movePlanLocked()
		}
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

// specHash is the digest of a submission's request, kept with its
// idempotency key.
func specHash(s api.JobSpec) string {
	body, _ := json.Marshal(s)
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// takeOver takes over the keyed submission id left SUBMITTING that no
// live agent stores. Called under submitMu with no submission of the key
// under way here; on a shared database another agent may be storing it:
// taken only if that agent is dead (its liveness in the database lapsed).
// On SQLite, which one process holds (the state directory's lock), the
// queue knows every submission under way, so the job is what a
// submission that failed half way could not remove (a full disk): taken.
// A PostgreSQL database is not locked to one process: not taken.
func (q *Queue) takeOver(ctx context.Context, id int64) (bool, error) {
	if !q.cfg.Shared {
		if store.IsURL(q.cfg.DBPath) {
			return false, nil
		}
		q.log.Warn("replacing a submission that failed half way", "job", id)
		return true, nil
	}
	took, err := q.st.TakeOverSubmission(ctx, id, q.now())
	if took {
		q.log.Warn("taking over a submission whose agent died half way", "job", id)
	}
	return took, err
}

// dropJob removes a job whose submission failed half way (a fresh
// context: the caller's may be what failed).
func (q *Queue) dropJob(id int64) {
	if err := q.st.DropJob(context.Background(), id, q.cfg.InsertChunk); err != nil {
		q.log.Error("could not remove a half-submitted job; it is removed at the next start", "job", id, "error", err)
	}
}

// cleanupPartialSubmits removes jobs whose submission started before cut
// and died half way.
func (q *Queue) cleanupPartialSubmits(ctx context.Context, cut time.Time) error {
	ids, err := q.st.SubmittingBefore(ctx, cut)
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
