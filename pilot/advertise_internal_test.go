package pilot

import (
	"net"
	"strings"
	"testing"
)

// An --advertise the queue would refuse as a master's address is an
// error at start that names it, not a pilot whose every lease request is
// a 400.
func TestAdvertiseIsCheckedAtStart(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8470}
	for adv, want := range map[string]string{
		"":               "http://127.0.0.1:8470",
		"node1":          "http://node1:8470",
		"node1:9000":     "http://node1:9000",
		"node1/v1/admin": "",
		"u@node1":        "",
	} {
		got, err := advertiseURL(adv, addr)
		if want == "" {
			if err == nil || !strings.Contains(err.Error(), "--advertise") {
				t.Errorf("%q: %q, %v: want an error naming --advertise", adv, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", adv, got, err, want)
		}
	}
}
