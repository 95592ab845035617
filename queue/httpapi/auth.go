package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/harvest-hpc/harvest/queue"
)

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

// credentials are what r presents: the socket peer, else the bearer token.
func credentials(r *http.Request) queue.Credentials {
	if p, ok := r.Context().Value(peerKey).(peer); ok {
		return queue.Credentials{Socket: true, UID: p.uid, PeerErr: p.err}
	}
	tok, _ := bearerToken(r.Header.Get("Authorization"))
	return queue.Credentials{Token: tok}
}

// bearerToken is the token of an Authorization header "Bearer TOKEN",
// the scheme in any case (RFC 9110); ok is false for another form.
func bearerToken(auth string) (tok string, ok bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(auth), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

func (s *Server) identify(r *http.Request) (queue.Identity, error) {
	return s.q.Identify(r.Context(), credentials(r))
}

// Authenticate identifies the caller of r exactly as the /v1 API does (peer
// credentials on the Unix socket, else a bearer token). r must come from a
// server started by ServeHandler or Serve so that socket peers are known.
func (s *Server) Authenticate(r *http.Request) (name, role string, err error) {
	id, err := s.identify(r)
	return id.User, id.Role, err
}

// AuthenticateToken identifies the holder of a bearer token (used by the
// status page, whose browser sends the token in a cookie), whatever the
// connection.
func (s *Server) AuthenticateToken(r *http.Request, token string) (name, role string, err error) {
	id, err := s.q.Identify(r.Context(), queue.Credentials{Token: strings.TrimSpace(token)})
	return id.User, id.Role, err
}
