package replay

import (
	"strings"
	"testing"
)

func TestParseLedgerPairsStartsAndEnds(t *testing.T) {
	runs, err := ParseLedger(strings.NewReader(`s 1 40 100.5
s 2 41 100.7
e 1 40 105.5
s 3 40 105.6
s 2 42 130.0
e 2 42 135.0
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 || !runs[0].Done() || runs[0].End != 105.5 || runs[1].Done() || runs[2].Done() || runs[3].Pilot != "42" || !runs[3].Done() {
		t.Fatalf("%+v", runs)
	}
	for _, bad := range []string{"x 1 2 3\n", "s 1 2\n", "s 1 2 now\n", "e 1 2 3\n"} {
		if _, err := ParseLedger(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
