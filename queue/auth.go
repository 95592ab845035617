package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os/user"
	"slices"
	"strconv"

	"github.com/harvest-hpc/harvest/queue/api"
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
		if slices.Contains(q.cfg.Admins, name) {
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
	name, role, ok, err := q.st.TokenIdentity(ctx, hashToken(c.Token))
	if err != nil {
		return Identity{}, err
	}
	if !ok {
		return Identity{}, fmt.Errorf("%w: invalid token", api.ErrUnauthorized)
	}
	id := Identity{User: name, Role: role, Via: "token"}
	if role == api.RolePilot || role == api.RoleAgent {
		id.Site = name // a site's tokens are stored under its name
	}
	return id, nil
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

// systemLookupUID maps a user name to its uid through the system's user
// database.
func systemLookupUID(name string) (uint32, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(uid), err
}

// systemLookupGroups lists the groups of a user's account (its primary
// group too) through the system's user database.
func systemLookupGroups(name string) ([]uint32, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, err
	}
	gids := make([]uint32, 0, len(ids))
	for _, id := range ids {
		gid, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, err
		}
		gids = append(gids, uint32(gid))
	}
	return gids, nil
}

func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// CreateToken creates a token for name with role (user or admin); only its
// sha256 is stored, the token itself is returned once.
func (q *Queue) CreateToken(ctx context.Context, name, role string) (api.Token, error) {
	if err := validUserName(name); err != nil {
		return api.Token{}, err
	}
	if role != api.RoleUser && role != api.RoleAdmin {
		return api.Token{}, invalid("role must be %q or %q, got %q", api.RoleUser, api.RoleAdmin, role)
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
	if err := q.st.PutToken(ctx, hashToken(tok), name, role, q.now()); err != nil {
		return api.Token{}, fmt.Errorf("store token: %w", err)
	}
	q.log.Info("token created", "user", name, "role", role)
	return api.Token{User: name, Role: role, Token: tok}, nil
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
	n, err := q.st.DeleteTokens(ctx, user, role)
	if err != nil {
		return 0, fmt.Errorf("revoke tokens: %w", err)
	}
	q.log.Info("tokens revoked", "user", user, "role", role, "count", n)
	return n, nil
}
