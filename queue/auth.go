package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-hpc/harvest/queue/api"
	"github.com/harvest-hpc/harvest/queue/store"
)

// Identity is who a request comes from.
type Identity struct {
	User, Role string
	Via        string // "socket" or "token"
	// Site is the site a pilot or agent acts for: pilots of one site reach
	// only their own pool.
	Site string
}

// Credentials are what a caller presents. On a Unix socket the kernel's
// peer uid is the identity and a token is ignored; elsewhere the bearer
// token is.
type Credentials struct {
	Socket  bool   // the request came over the Unix socket
	UID     uint32 // the peer's uid (SO_PEERCRED), when Socket
	PeerErr error  // why the peer's credentials could not be read
	Token   string // the bearer token, when not Socket
}

// Identify finds the caller: the peer uid on the Unix socket (root is
// admin, so are the configured admins), else a bearer token (the local
// site's pilot token, or a token stored hashed: user, admin, a remote
// site's agent or pilots).
func (q *Queue) Identify(ctx context.Context, c Credentials) (Identity, error) {
	if c.Socket {
		if c.PeerErr != nil {
			return Identity{}, fmt.Errorf("%w: cannot read peer credentials: %v", api.ErrUnauthorized, c.PeerErr)
		}
		if c.UID == 0 {
			return Identity{User: "root", Role: api.RoleAdmin, Via: "socket"}, nil
		}
		name, err := q.cfg.LookupUser(c.UID)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: uid %d has no user name: %v", api.ErrForbidden, c.UID, err)
		}
		role := api.RoleUser
		if q.isAdmin(name) {
			role = api.RoleAdmin
		}
		return Identity{User: name, Role: role, Via: "socket"}, nil
	}
	if c.Token == "" {
		return Identity{}, fmt.Errorf("%w: missing bearer token (set HARVEST_TOKEN, or use the Unix socket)", api.ErrUnauthorized)
	}
	if q.cfg.PilotToken != "" && subtle.ConstantTimeCompare([]byte(c.Token), []byte(q.cfg.PilotToken)) == 1 {
		return Identity{User: "pilot", Role: api.RolePilot, Via: "token", Site: q.cfg.LocalSite}, nil
	}
	name, role, expires, ok, err := q.st.TokenIdentity(ctx, hashToken(c.Token))
	if err != nil {
		return Identity{}, err
	}
	if !ok {
		return Identity{}, fmt.Errorf("%w: invalid token", api.ErrUnauthorized)
	}
	if !expires.IsZero() && !q.now().Before(expires) {
		return Identity{}, fmt.Errorf("%w: this token of %s expired at %s: make a new one (`harvest token create --save` on the queue's socket, or ask an admin)",
			api.ErrUnauthorized, name, expires.UTC().Format(time.RFC3339))
	}
	// An admin token's role is the configuration's now, not the one its
	// holder had when it was made: an admin taken out of --admin loses
	// every admin token at the next request (and has them back if the
	// name is given back); nothing is deleted.
	if role == api.RoleAdmin && !q.isAdmin(name) {
		return Identity{}, fmt.Errorf("%w: %s is not an admin (not in --admin, HARVEST_ADMINS or the config's admin list) any more: its admin tokens are refused; use a user token, or add %s back to the list", api.ErrForbidden, name, name)
	}
	id := Identity{User: name, Role: role, Via: "token"}
	if role == api.RolePilot || role == api.RoleAgent {
		id.Site = name // a site's tokens are stored under its name
	}
	return id, nil
}

// isAdmin says whether name is an admin under the current configuration:
// root, or a name in --admin.
func (q *Queue) isAdmin(name string) bool {
	return name == "root" || slices.Contains(q.cfg.Admins, name)
}

// systemLookupUser maps a uid to a user name through the system's user
// database (NSS: /etc/passwd, LDAP, ...).
func systemLookupUser(uid uint32) (string, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return "", err
	}
	return u.Username, nil
}

func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// CreateToken creates a token for name with role (user or admin) with the
// queue's default lifetime; only its sha256 is stored, the token itself is
// returned once.
func (q *Queue) CreateToken(ctx context.Context, name, role string) (api.Token, error) {
	return q.CreateTokenTTL(ctx, name, role, 0)
}

// CreateTokenTTL is CreateToken with a lifetime of its own (0: the
// queue's default, Config.TokenTTL).
func (q *Queue) CreateTokenTTL(ctx context.Context, name, role string, ttl time.Duration) (api.Token, error) {
	if err := q.mayHold(name, role); err != nil {
		return api.Token{}, err
	}
	if ttl < 0 || ttl > api.MaxTokenTTL*time.Second {
		return api.Token{}, invalid("a token's lifetime must be positive and at most 10 years, got %v", ttl)
	}
	if ttl == 0 {
		ttl = q.cfg.TokenTTL
	}
	now := q.now()
	var expires time.Time
	if ttl > 0 {
		expires = now.Add(ttl)
	}
	if role == api.RoleUser {
		if err := q.ensureUser(ctx, name); err != nil {
			return api.Token{}, err
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return api.Token{}, fmt.Errorf("token: %w", err)
	}
	tok := "hv_" + base64.RawURLEncoding.EncodeToString(b[:])
	if err := q.st.PutToken(ctx, hashToken(tok), name, role, now, expires, q.cfg.MaxTokensPerUser); err != nil {
		if errors.Is(err, store.ErrTokenCap) {
			return api.Token{}, fmt.Errorf("%w: %s already holds %d %s tokens, the most this queue allows (--max-tokens-per-user): revoke one you no longer use (`harvest token list`, `harvest token revoke ID`)",
				api.ErrConflict, name, q.cfg.MaxTokensPerUser, role)
		}
		return api.Token{}, err
	}
	q.log.Info("token created", "user", name, "role", role, "ttl", ttl)
	t := api.Token{User: name, Role: role, Token: tok}
	if !expires.IsZero() {
		t.ExpiresAt = expires.Unix()
	}
	return t, nil
}

// Tokens lists user's user and admin tokens, oldest first: their IDs,
// never the tokens.
func (q *Queue) Tokens(ctx context.Context, user string) ([]api.TokenInfo, error) {
	if err := validUserName(user); err != nil {
		return nil, err
	}
	ts, err := q.st.Tokens(ctx, user)
	if err != nil {
		return nil, err
	}
	out := make([]api.TokenInfo, 0, len(ts))
	for _, t := range ts {
		if t.Role != api.RoleUser && t.Role != api.RoleAdmin {
			continue // a site's agent token, under its site's name
		}
		ti := api.TokenInfo{ID: t.Hash[:min(len(t.Hash), api.TokenIDLen)], User: t.User, Role: t.Role, CreatedAt: t.Created.Unix()}
		if !t.Expires.IsZero() {
			ti.ExpiresAt = t.Expires.Unix()
		}
		out = append(out, ti)
	}
	return out, nil
}

// RevokeToken deletes user's token whose ID (the start of its hash, as
// Tokens shows it; at least 8 hex digits) is id.
func (q *Queue) RevokeToken(ctx context.Context, user, id string) error {
	if err := validUserName(user); err != nil {
		return err
	}
	if len(id) < 8 || len(id) > 64 || strings.Trim(id, "0123456789abcdef") != "" {
		return invalid("a token ID is 8 to 64 lower-case hex digits (`harvest token list` shows them), got %q", id)
	}
	ts, err := q.Tokens(ctx, user)
	if err != nil {
		return err
	}
	var match []api.TokenInfo
	for _, t := range ts {
		if strings.HasPrefix(t.ID, id[:min(len(id), len(t.ID))]) {
			match = append(match, t)
		}
	}
	switch {
	case len(match) == 0:
		return fmt.Errorf("%w: %s has no token %s", api.ErrNotFound, user, id)
	case len(match) > 1:
		return invalid("%s has %d tokens whose ID starts with %s: give more digits", user, len(match), id)
	}
	// The store matches the whole prefix given (up to the full hash) and
	// the role: another role's token under the same name (a site's agent
	// token) is never touched.
	k, err := q.st.DeleteTokens(ctx, user, match[0].Role, id, true)
	if err != nil {
		return err
	}
	if k != 1 {
		return fmt.Errorf("%w: %s has no token %s (revoked meanwhile?)", api.ErrNotFound, user, id)
	}
	q.log.Info("token revoked", "user", user, "id", id)
	return nil
}

// RotateTokens revokes every token of user with role (user or admin) and
// makes a new one, returned with how many were revoked. Whatever would
// refuse the new token is checked first: a rotation that cannot end with
// a token revokes nothing (an admin token for a name no longer in --admin
// revoked its tokens and then failed).
func (q *Queue) RotateTokens(ctx context.Context, user, role string) (api.Token, int, error) {
	if err := q.mayHold(user, role); err != nil {
		return api.Token{}, 0, err
	}
	if role == api.RoleUser {
		if err := q.KnownUser(user, true, false); err != nil {
			return api.Token{}, 0, err // a typo would have made a token for a new name
		}
	}
	n, err := q.RevokeTokens(ctx, user, role)
	if err != nil {
		return api.Token{}, 0, err
	}
	tok, err := q.CreateToken(ctx, user, role)
	if err != nil {
		return api.Token{}, n, fmt.Errorf("%d %s token(s) of %s revoked, but a new one could not be made (run the rotation again): %w", n, role, user, err)
	}
	return tok, n, nil
}

// mayHold checks that name may hold a token with role (user or admin).
func (q *Queue) mayHold(name, role string) error {
	if err := validUserName(name); err != nil {
		return err
	}
	if role != api.RoleUser && role != api.RoleAdmin {
		return invalid("role must be %q or %q, got %q", api.RoleUser, api.RoleAdmin, role)
	}
	if role == api.RoleAdmin && !q.isAdmin(name) {
		return invalid("%s is not an admin: an admin token is made only for root or a name in --admin (HARVEST_ADMINS, the config's admin list); add %s there first, or make a user token", name, name)
	}
	return nil
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
	n, err := q.st.DeleteTokens(ctx, user, role, "", false)
	if err != nil {
		return 0, fmt.Errorf("revoke tokens: %w", err)
	}
	q.log.Info("tokens revoked", "user", user, "role", role, "count", n)
	return n, nil
}

// sweepTokens deletes the expired tokens (Identify refuses them already:
// this keeps the table, and the count against --max-tokens-per-user, to
// the live ones).
func (q *Queue) sweepTokens(ctx context.Context) error {
	n, err := q.st.SweepTokens(ctx, q.now())
	if n > 0 {
		q.log.Info("expired tokens deleted", "count", n)
	}
	return err
}

// TokenTTL is the queue's default token lifetime (0: none).
func (q *Queue) TokenTTL() time.Duration { return q.cfg.TokenTTL }
