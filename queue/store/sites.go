package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Site is the admin's settings of a site other than the local one.
type Site struct {
	Name               string
	MinNodes, MaxNodes int
	Paused             bool
	CreatedAt          time.Time
}

// Sites reads every registered site, by name.
func (s *Store) Sites(ctx context.Context) ([]Site, error) {
	return list(ctx, s, "read sites", func(r scanner) (st Site, err error) {
		var created int64
		err = r.Scan(&st.Name, &st.MinNodes, &st.MaxNodes, &st.Paused, &created)
		st.CreatedAt = time.UnixMilli(created)
		return st, err
	}, `SELECT name, min_nodes, max_nodes, paused, created_at FROM sites ORDER BY name`)
}

// Site reads one registered site; ok is false if there is none.
func (s *Store) Site(ctx context.Context, name string) (Site, bool, error) {
	all, err := s.Sites(ctx) // a handful
	for _, x := range all {
		if x.Name == name {
			return x, true, err
		}
	}
	return Site{}, false, err
}

// AddSite registers a site (keeping its settings) with agentHash its only agent token.
func (s *Store) AddSite(ctx context.Context, name, agentHash, agentRole string, now time.Time) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		return execs(ctx, tx, append(replaceToken(name, agentRole, agentHash, now),
			[]any{`INSERT INTO sites (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, ms(now)})...)
	})
}

// PutSite stores a registered site's floor, cap and pause.
func (s *Store) PutSite(ctx context.Context, st Site) error {
	n, err := s.do(ctx, "store site "+st.Name, `UPDATE sites SET min_nodes = $1, max_nodes = $2, paused = CASE WHEN $3 THEN 1 ELSE 0 END WHERE name = $4`,
		st.MinNodes, st.MaxNodes, st.Paused, st.Name)
	if err == nil && n == 0 {
		err = fmt.Errorf("site %s is not registered", st.Name)
	}
	return err
}

// ReplaceToken makes hash the only token of user with role.
func (s *Store) ReplaceToken(ctx context.Context, user, role, hash string, now time.Time) error {
	return s.write(ctx, func(tx *sql.Tx) error { return execs(ctx, tx, replaceToken(user, role, hash, now)...) })
}

func replaceToken(user, role, hash string, now time.Time) [][]any {
	return [][]any{{`DELETE FROM tokens WHERE "user" = $1 AND role = $2 AND hash <> $3`, user, role, hash},
		{`INSERT INTO tokens (hash, "user", role, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (hash) DO UPDATE SET "user" = excluded."user", role = excluded.role`, hash, user, role, ms(now)}}
}

// NodeSettings reads the admin's floor and cap of local nodes and the global cap (0 = none).
func (s *Store) NodeSettings(ctx context.Context) (minNodes, maxNodes, globalMax int, err error) {
	v, err := s.sums(ctx, "read node settings", `SELECT key, value FROM settings WHERE key IN ('min_nodes', 'max_nodes', 'global_max_nodes')`)
	return v["min_nodes"], v["max_nodes"], v["global_max_nodes"], err
}

// PutNodeSettings stores the admin's floor, cap and cap across all sites.
func (s *Store) PutNodeSettings(ctx context.Context, minNodes, maxNodes, globalMax int) error {
	return s.putSetting(ctx, "min_nodes", strconv.Itoa(minNodes), "max_nodes", strconv.Itoa(maxNodes), "global_max_nodes", strconv.Itoa(globalMax))
}

// putSetting stores settings (key, value, key, value, ...) in one statement.
func (s *Store) putSetting(ctx context.Context, kv ...string) error {
	args, rows := make([]any, len(kv)), make([]string, len(kv)/2)
	for i, v := range kv {
		args[i], rows[i/2] = v, fmt.Sprintf("($%d, $%d)", i/2*2+1, i/2*2+2)
	}
	_, err := s.do(ctx, "store setting "+kv[0], `INSERT INTO settings (key, value) VALUES `+strings.Join(rows, ", ")+
		` ON CONFLICT (key) DO UPDATE SET value = excluded.value`, args...)
	return err
}

// SiteRound is a site's agent's last round, for the other agents.
type SiteRound struct {
	Held int   `json:"held"`
	Idle int   `json:"idle"`
	AtMS int64 `json:"at_ms"`
}

// siteRoundKey prefixes the settings rows of the sites' rounds.
const siteRoundKey = "round:"

// PutSiteRound records a site's latest round.
func (s *Store) PutSiteRound(ctx context.Context, site string, r SiteRound) error {
	v, _ := json.Marshal(r)
	return s.putSetting(ctx, siteRoundKey+site, string(v))
}

// SiteRounds reads every site's latest round.
func (s *Store) SiteRounds(ctx context.Context) (map[string]SiteRound, error) {
	return byKey(ctx, s, "read the sites' rounds", func(rs scanner) (site string, r SiteRound, err error) {
		var v string
		if err = rs.Scan(&site, &v); err == nil {
			site = strings.TrimPrefix(site, siteRoundKey)
			err = wrap(json.Unmarshal([]byte(v), &r), "the round of site %s", site)
		}
		return site, r, err
	}, `SELECT key, value FROM settings WHERE key LIKE $1`, siteRoundKey+"%")
}
