package pilotproto

import "testing"

func TestCheckAddress(t *testing.T) {
	for _, ok := range []string{"http://n1:8470", "https://node-1.cluster:443", "http://10.0.0.1:1", "http://[::1]:8470", "http://n1:8470/", "http://n1"} {
		if err := CheckAddress(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "n1:8470", "ftp://n1:21", "file:///etc/passwd", "http://n1:", "http://n1:0", "http://n1:99999",
		"http://n1:8470/x", "http://n1:8470/..", "http://u:p@n1:8470", "http://n1:8470?x", "http://n1:8470#f", "http://:8470",
		"HTTP://n1:8470/%2e%2e", "http://n1:84x0", "http://n1:8470\n", "javascript:alert(1)"} {
		if err := CheckAddress(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
