package workerproto

import (
	"strings"
	"testing"
)

// A worker's pilot address is probed by each new master: only an http(s)
// URL of a host and port, as a master's in its lease.
func TestRegistrationRefusesABadPilotAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"":                        "",
		"http://n1:8470":          "",
		"file:///etc/passwd":      "scheme",
		"http://n1:8470/v1/admin": "no path",
		"http://u:p@n1:8470":      "credentials",
	} {
		r := RegisterRequest{WorkerID: "w", Slots: 1, Capacity: 1, Address: addr}
		err := r.Validate()
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", addr, err, want)
		}
	}
}
