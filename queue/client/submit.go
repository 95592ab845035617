package client

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/harvest-hpc/harvest/queue/api"
)

// SubmitOptions tune a submission.
type SubmitOptions struct {
	// IdempotencyKey names the submission: a retry with the same key (by
	// this call, or by the caller after a crash) gets the first job. ""
	// makes a new key for this call.
	IdempotencyKey string
	// Progress, when set, hears how far the queue is in listing the
	// dataset and storing its tasks (every 250 ms while it works).
	Progress func(api.SubmitProgress)
}

// NewIdempotencyKey returns a random key for a submission.
func NewIdempotencyKey() string {
	var b [16]byte
	rand.Read(b[:])
	return "hv-" + hex.EncodeToString(b[:])
}

// Submit submits a job and waits until the queue has stored it (see SubmitWith).
func (c *Client) Submit(ctx context.Context, spec api.JobSpec) (api.Job, error) {
	return c.SubmitWith(ctx, spec, SubmitOptions{})
}

// SubmitWith submits a job and waits until the queue has stored it, which
// for a dataset of a million entries takes seconds. The answer streams
// progress, so there is no overall timeout, only Config.Timeout of silence;
// a connection that dies or falls silent is retried (for Config.RetryFor
// since the last progress the queue reported) with the same idempotency key, which joins
// the submission under way or gets the job it made: never a second job.
// With several queue URLs the retry may go to another agent of the same
// database, which finds the key there.
func (c *Client) SubmitWith(ctx context.Context, spec api.JobSpec, o SubmitOptions) (api.Job, error) {
	if o.IdempotencyKey == "" {
		o.IdempotencyKey = NewIdempotencyKey()
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 200*time.Millisecond, 5*time.Second, 0
	alive := time.Now()
	for {
		var j api.Job
		err := c.each(ctx, true, func(ep endpoint) error {
			var err error
			j, err = c.submitOnce(ctx, ep, spec, o, func() { alive = time.Now(); b.Reset() })
			return err
		})
		var perm *backoff.PermanentError
		switch {
		case err == nil:
			return j, nil
		case errors.As(err, &perm):
			return j, perm.Err
		case ctx.Err() != nil:
			return j, ctx.Err()
		case c.cfg.RetryFor == 0 || time.Since(alive) > c.cfg.RetryFor:
			return j, err
		}
		select {
		case <-time.After(b.NextBackOff()):
		case <-ctx.Done():
			return api.Job{}, ctx.Err()
		}
	}
}

// submitOnce is one exchange; errors worth retrying (network, silence,
// 5xx) are plain, the others backoff.Permanent. alive is called on every
// progress line: an answer alone is no sign of life (a queue whose disk is
// full answers 500 at once, every time, and was asked again for ever).
func (c *Client) submitOnce(ctx context.Context, ep endpoint, spec api.JobSpec, o SubmitOptions, alive func()) (api.Job, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errSilent := fmt.Errorf("no word from the queue for %v", c.cfg.Timeout)
	silence := time.AfterFunc(c.cfg.Timeout, func() { cancel(errSilent) }) // reset on every line
	defer silence.Stop()
	fail := func(err error) error {
		if context.Cause(ctx) == errSilent {
			err = errSilent
		}
		return fmt.Errorf("queue POST %s: %w", api.PathJobs, err)
	}
	resp, err := ep.stream.R().SetContext(ctx).SetDoNotParseResponse(true).
		SetHeader("Content-Type", "application/json").SetHeader(api.HeaderIdempotencyKey, o.IdempotencyKey).
		SetBody(spec).Post(api.PathJobs)
	if err != nil {
		return api.Job{}, fail(err)
	}
	body := resp.RawBody()
	defer body.Close()
	silence.Reset(c.cfg.Timeout)
	status := resp.StatusCode()
	ct := resp.Header().Get("Content-Type")
	if status >= 300 || !strings.HasPrefix(ct, api.ContentTypeNDJSON) {
		// An error answer, or a queue that does not stream: one JSON document.
		var j api.Job
		var ae api.Error
		dec := json.NewDecoder(body)
		if status < 300 {
			if err := dec.Decode(&j); err != nil {
				return api.Job{}, fail(err)
			}
			return j, nil
		}
		dec.Decode(&ae)
		e := &Error{Status: status, Code: ae.Code, Message: ae.Error}
		if e.Message == "" {
			e.Message = http.StatusText(status)
		}
		if status >= 500 {
			return api.Job{}, e // no sign of life: a queue failing at once every time is asked for RetryFor, not for ever
		}
		return api.Job{}, backoff.Permanent(e)
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		silence.Reset(c.cfg.Timeout)
		var ev api.SubmitEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return api.Job{}, fmt.Errorf("queue POST %s: bad line %q: %w", api.PathJobs, sc.Text(), err)
		}
		switch {
		case ev.Progress != nil:
			alive()
			if o.Progress != nil {
				o.Progress(*ev.Progress)
			}
		case ev.Job != nil:
			return *ev.Job, nil
		case ev.Error != "":
			e := &Error{Status: api.StatusOf(ev.Code), Code: ev.Code, Message: ev.Error}
			if e.Status >= 500 {
				return api.Job{}, e
			}
			return api.Job{}, backoff.Permanent(e)
		}
	}
	if err := sc.Err(); err != nil {
		return api.Job{}, fail(err)
	}
	return api.Job{}, fmt.Errorf("queue POST %s: the answer ended before the job", api.PathJobs)
}
