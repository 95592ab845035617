package logcap

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCutKeepsTheHeadAMarkerAndTheTail: a log written past its limit in
// several rounds, cut between them as a running task's is, ends as its
// first max bytes, the marker and the last KeepTail bytes written; the
// writer's offset follows on after each cut (no hole, no zeros).
func TestCutKeepsTheHeadAMarkerAndTheTail(t *testing.T) {
	const max = 64 << 10
	f, err := os.Create(filepath.Join(t.TempDir(), "1.1.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var all bytes.Buffer
	line := 0
	write := func(n int) {
		for i := 0; i < n; i++ {
			s := strings.Repeat("x", 90) + " line " + string(rune('a'+line%26)) + "\n"
			line++
			all.WriteString(s)
			if _, err := f.WriteString(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	fd := int(f.Fd())
	write(100) // under the limit: left alone
	if cut, err := Cut(fd, max); cut || err != nil {
		t.Fatalf("a log under its limit was cut: %v %v", cut, err)
	}
	for range 5 {
		write(3000) // ~290 KiB a round
		if cut, err := Cut(fd, max); !cut || err != nil {
			t.Fatalf("a log over its limit: cut %v, %v", cut, err)
		}
		if st, _ := f.Stat(); st.Size() > max+int64(len(Marker(max)))+KeepTail {
			t.Fatalf("after a cut the log is %d bytes", st.Size())
		}
	}
	write(10) // after the last cut, less than KeepTail
	Cut(fd, max)
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	// After the last write the log is over its limit again: cut once more.
	want := append(append(append([]byte(nil), all.Bytes()[:max]...), Marker(max)...), all.Bytes()[all.Len()-KeepTail:]...)
	if !bytes.Equal(got, want) {
		t.Fatalf("the cut log is %d bytes (want %d), zeros at %d", len(got), len(want), bytes.IndexByte(got, 0))
	}
	if cut, _ := Cut(fd, 0); cut {
		t.Fatal("max 0 cut the log")
	}
}
