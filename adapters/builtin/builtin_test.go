package builtin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/adapters/simlive"
)

func TestTheCatalogListsEveryBuiltinAdapterOnceSortedWithItsUsage(t *testing.T) {
	names := Names()
	if want := []string{"htcondor", "sim", "slurm"}; !slices.Equal(names, want) {
		t.Fatalf("Names() = %v, want %v", names, want)
	}
	for _, n := range names {
		if !IsBuiltin(n) || Usage(n) == "" {
			t.Errorf("%s: IsBuiltin %v, usage %q", n, IsBuiltin(n), Usage(n))
		}
	}
	if IsBuiltin("pbs") || Usage("pbs") != "" {
		t.Error("an unknown name reads as built in")
	}
}

func TestNewBuildsTheNamedAdapterWithItsOptions(t *testing.T) {
	a, err := New("sim", map[string]string{"nodes": "3"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := a.Info(context.Background())
	if err != nil || info.Name != "sim" {
		t.Fatalf("info %+v, %v", info, err)
	}
	if _, err := New("sim", map[string]string{"speed": "-1"}); !errors.Is(err, simlive.ErrInvalidConfig) {
		t.Fatalf("bad option: %v, want simlive.ErrInvalidConfig", err)
	}
	if _, err := New("pbs", nil); err == nil || !strings.Contains(err.Error(), "built in: htcondor, sim, slurm") {
		t.Fatalf("unknown adapter: %v, want the list of built-in ones", err)
	}
}
