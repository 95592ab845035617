package replay

import (
	"fmt"
	"strconv"
	"strings"
)

// expandHostlist expands a SLURM host list as the job completion log's
// NodeList writes it: names and bracketed ranges, comma-separated
// ("n[1-3,5],m2"; zero-padded bounds keep their width: "n[08-10]").
func expandHostlist(s string) ([]string, error) {
	var out []string
	for s != "" {
		// One entry: up to the first comma outside brackets.
		end, depth := len(s), 0
		for i, r := range s {
			switch r {
			case '[':
				depth++
			case ']':
				depth--
			}
			if r == ',' && depth == 0 {
				end = i
				break
			}
		}
		entry := s[:end]
		s = strings.TrimPrefix(s[end:], ",")
		open := strings.IndexByte(entry, '[')
		if open < 0 {
			if entry == "" || strings.ContainsAny(entry, "]") {
				return nil, fmt.Errorf("host list entry %q", entry)
			}
			out = append(out, entry)
			continue
		}
		closing := strings.IndexByte(entry, ']')
		if closing < open || strings.ContainsAny(entry[closing+1:], "[]") {
			return nil, fmt.Errorf("host list entry %q: one bracketed range list, please", entry)
		}
		prefix, suffix := entry[:open], entry[closing+1:]
		for _, rg := range strings.Split(entry[open+1:closing], ",") {
			lo, hi, isRange := strings.Cut(rg, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("host list range %q in %q", rg, entry)
			}
			for n := a; n <= b; n++ {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), n, suffix))
			}
		}
	}
	return out, nil
}
