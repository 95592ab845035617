package queue

// Exports for the agent's operations endpoints (status page, metrics,
// admin operations) that share the queue's listeners and authentication.
// Additive only: nothing here changes how the queue itself behaves.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
)

// Authenticate identifies the caller of r exactly as the /v1 API does (peer
// credentials on the Unix socket, else a bearer token). r must come from a
// server started by ServeHandler or Serve so that socket peers are known.
func (q *Queue) Authenticate(r *http.Request) (name, role string, err error) {
	id, err := q.authenticate(r)
	if err != nil {
		return "", "", err
	}
	return id.user, id.role, nil
}

// AuthenticateToken identifies the holder of a bearer token (used by the
// status page, whose browser sends the token in a cookie).
func (q *Queue) AuthenticateToken(r *http.Request, token string) (name, role string, err error) {
	r2 := r.Clone(r.Context())
	// Drop the socket peer so that only the token counts.
	r2 = r2.WithContext(context.WithValue(r.Context(), peerKey, nil))
	r2.Header.Set("Authorization", "Bearer "+token)
	return q.Authenticate(r2)
}

// WriteError writes err as the API's JSON error body with its status.
func (q *Queue) WriteError(w http.ResponseWriter, err error) { writeErr(w, err, q) }

// ServeHandler is Serve with another handler (the agent's mux, which
// wraps Handler): Unix-socket callers are identified by peer credentials.
func (q *Queue) ServeHandler(ctx context.Context, h http.Handler, listeners ...net.Listener) error {
	if len(listeners) == 0 {
		return errors.New("queue: serve: no listener")
	}
	srv := &http.Server{
		Handler:           h,
		ConnContext:       connContext,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, len(listeners))
	for _, l := range listeners {
		go func(l net.Listener) {
			q.log.Info("queue API listening", "addr", l.Addr().String())
			errc <- srv.Serve(l)
		}(l)
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			srv.Close()
			return fmt.Errorf("queue: serve: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// RevokeTokens deletes every token of user with role (user or admin) and
// returns how many there were. The pilot token is not stored here.
func (q *Queue) RevokeTokens(ctx context.Context, user, role string) (int, error) {
	if err := validUserName(user); err != nil {
		return 0, err
	}
	if role != api.RoleUser && role != api.RoleAdmin {
		return 0, invalid("role must be %q or %q, got %q", api.RoleUser, api.RoleAdmin, role)
	}
	var n int64
	err := q.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE user = ? AND role = ?`, user, role)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("revoke tokens: %w", err)
	}
	q.log.Info("tokens revoked", "user", user, "role", role, "count", n)
	return int(n), nil
}

// TaskStats counts tasks of the jobs still stored (final jobs are purged
// after the retention period), per owner.
type TaskStats struct {
	Waiting, Running, Done, Failed, Killed int
}

// Stats is a read-only summary for metrics.
type Stats struct {
	// ByUser counts tasks per job owner.
	ByUser map[string]TaskStats
	// Requeued counts hand-outs beyond a task's first (retries after a
	// failure, and requeues after an interruption or an expiry).
	Requeued int
	// Epoch is the master lease's epoch (0 = no master ever); MasterAlive
	// reports whether the lease is held and not expired.
	Epoch       int64
	MasterAlive bool
}

// Stats reads the figures the agent's metrics export. Two short reads.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	st := Stats{ByUser: map[string]TaskStats{}}
	rows, err := q.r.QueryContext(ctx, `SELECT owner, sum(n_waiting), sum(n_active), sum(n_done), sum(n_failed), sum(n_killed) FROM jobs GROUP BY owner`)
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var owner string
		var t TaskStats
		if err := rows.Scan(&owner, &t.Waiting, &t.Running, &t.Done, &t.Failed, &t.Killed); err != nil {
			return st, fmt.Errorf("stats: %w", err)
		}
		st.ByUser[owner] = t
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	if err := q.r.QueryRowContext(ctx, `SELECT coalesce(sum(attempt - 1), 0) FROM tasks WHERE attempt > 1`).Scan(&st.Requeued); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	q.mu.Lock()
	st.Epoch = q.lease.epoch
	st.MasterAlive = q.lease.holder != "" && q.now().Before(q.lease.expires)
	q.mu.Unlock()
	return st, nil
}
