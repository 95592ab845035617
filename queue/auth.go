package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/harvest-hpc/harvest/queue/api"
)

// identity is who a request comes from.
type identity struct {
	user, role, via string
}

type ctxKey int

const peerKey ctxKey = 1

// peer is what the kernel says about the other end of a Unix socket.
type peer struct {
	uid uint32
	err error
}

// connContext records the peer's uid (SO_PEERCRED) for Unix-socket
// connections: the kernel vouches for it, so it cannot be forged.
func connContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	p := peer{err: errors.New("no peer credentials")}
	raw, err := uc.SyscallConn()
	if err != nil {
		p.err = err
		return context.WithValue(ctx, peerKey, p)
	}
	cerr := raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			p.err = err
			return
		}
		p = peer{uid: cred.Uid}
	})
	if cerr != nil {
		p.err = cerr
	}
	return context.WithValue(ctx, peerKey, p)
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

// authenticate finds the caller: the peer uid on the Unix socket (root is
// admin, so are the configured admins), else a bearer token (the pilot
// token, or a user/admin token stored hashed).
func (q *Queue) authenticate(r *http.Request) (identity, error) {
	if p, ok := r.Context().Value(peerKey).(peer); ok {
		if p.err != nil {
			return identity{}, fmt.Errorf("%w: cannot read peer credentials: %v", api.ErrUnauthorized, p.err)
		}
		if p.uid == 0 {
			return identity{user: "root", role: api.RoleAdmin, via: "socket"}, nil
		}
		name, err := q.cfg.LookupUser(p.uid)
		if err != nil {
			return identity{}, fmt.Errorf("%w: uid %d has no user name: %v", api.ErrForbidden, p.uid, err)
		}
		role := api.RoleUser
		if slices.Contains(q.cfg.Admins, name) {
			role = api.RoleAdmin
		}
		return identity{user: name, role: role, via: "socket"}, nil
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return identity{}, fmt.Errorf("%w: missing bearer token (set HARVEST_TOKEN, or use the Unix socket)", api.ErrUnauthorized)
	}
	tok = strings.TrimSpace(tok)
	if q.cfg.PilotToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(q.cfg.PilotToken)) == 1 {
		return identity{user: "pilot", role: api.RolePilot, via: "token"}, nil
	}
	var id identity
	err := q.r.QueryRowContext(r.Context(), `SELECT user, role FROM tokens WHERE hash = ?`, hashToken(tok)).Scan(&id.user, &id.role)
	if errors.Is(err, sql.ErrNoRows) {
		return identity{}, fmt.Errorf("%w: invalid token", api.ErrUnauthorized)
	}
	if err != nil {
		return identity{}, fmt.Errorf("look up token: %w", err)
	}
	id.via = "token"
	return id, nil
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
	err := q.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tokens (hash, user, role, created_at) VALUES (?, ?, ?, ?)`, hashToken(tok), name, role, ms(q.now()))
		return err
	})
	if err != nil {
		return api.Token{}, fmt.Errorf("store token: %w", err)
	}
	q.log.Info("token created", "user", name, "role", role)
	return api.Token{User: name, Role: role, Token: tok}, nil
}
