package pilotproto

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
)

// CheckAddress refuses a pilot address (a master's in its lease, a
// worker's pilot's at registration) that is not an http or https URL of
// a host (and port) and nothing else: other pilots' workers send it the
// pilot token, and a new master probes it, so a path, credentials, a
// query or another scheme have no business there.
func CheckAddress(addr string) error {
	bad := func(why string) error {
		return fmt.Errorf("address %q: %s (want http://HOST:PORT or https://HOST:PORT)", addr, why)
	}
	u, err := url.Parse(addr)
	switch {
	case err != nil:
		return bad("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("the scheme must be http or https")
	case u.Opaque != "" || u.User != nil:
		return bad("no credentials or opaque part")
	case (u.Path != "" && u.Path != "/") || u.RawPath != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "":
		return bad("no path, query or fragment")
	}
	host, port, err := net.SplitHostPort(u.Host)
	switch {
	case err != nil:
		// No port: the scheme's (80, 443).
		host, port = u.Host, ""
	case port == "":
		return bad("the port must be 1-65535")
	}
	if host == "" || u.Hostname() == "" {
		return bad("a host is required")
	}
	if n, err := strconv.Atoi(port); port != "" && (err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port) {
		return bad("the port must be 1-65535")
	}
	return nil
}
