package replay

import (
	"slices"
	"testing"
)

func TestExpandHostlistReadsSlurmsNodeLists(t *testing.T) {
	for in, want := range map[string][]string{
		"n3":           {"n3"},
		"n[1-2]":       {"n1", "n2"},
		"n[1,3-4],m2":  {"n1", "n3", "n4", "m2"},
		"n[8-10]":      {"n8", "n9", "n10"},
		"n[08-10]":     {"n08", "n09", "n10"},
		"a[1-2]-ib,b1": {"a1-ib", "a2-ib", "b1"},
	} {
		got, err := expandHostlist(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"n[1-", "n[2-1]", "n]1", "n[a-b]", "n[1-2][3]", "n1,,n2"} {
		if got, err := expandHostlist(bad); err == nil {
			t.Errorf("%q accepted: %v", bad, got)
		}
	}
}
