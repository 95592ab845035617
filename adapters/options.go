package adapters

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// ParseOptions turns "key=value" pairs (the agent's repeated
// --adapter-opt flags) into an options map.
func ParseOptions(pairs []string) (map[string]string, error) {
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("adapter option %q: want key=value", p)
		}
		out[k] = v
	}
	return out, nil
}

// OptionsFromEnv reads the options the agent handed to a plugin process.
func OptionsFromEnv() (map[string]string, error) {
	raw := os.Getenv(OptionsEnv)
	if raw == "" {
		return map[string]string{}, nil
	}
	var out map[string]string
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("%s: %w", OptionsEnv, err)
	}
	return out, nil
}

func encodeOptions(o map[string]string) (string, error) {
	if o == nil {
		o = map[string]string{}
	}
	b, err := json.Marshal(o)
	return string(b), err
}

// UnknownOptions returns an error naming the options not in known, so a
// typo in a site's configuration is caught at start instead of ignored.
func UnknownOptions(o map[string]string, known ...string) error {
	var bad []string
	for k := range o {
		found := false
		for _, n := range known {
			if k == n {
				found = true
				break
			}
		}
		if !found {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("unknown adapter option(s) %s (known: %s)", strings.Join(bad, ", "), strings.Join(known, ", "))
	}
	return nil
}
