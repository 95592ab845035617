package pilot

import (
	"errors"
	"strings"
	"testing"

	"github.com/harvest-hpc/harvest/worker/confine"
)

// TestRequiredConfinementOnAnOldLandlockIsRefusedAtStart: --confine
// require on a kernel whose Landlock ABI is older than the tasks' rules
// need started, then failed every task; it is refused at start, naming
// the ABI needed and the one found.
func TestRequiredConfinementOnAnOldLandlockIsRefusedAtStart(t *testing.T) {
	defer func(p func() confine.Support) { probeConfine = p }(probeConfine)
	c := DefaultConfig()
	c.PilotID, c.Token, c.StateDir, c.Confine = "7", "tok", t.TempDir(), confine.ModeRequire
	for abi := 0; abi <= 7; abi++ {
		probeConfine = func() confine.Support {
			if abi == 0 {
				return confine.Support{Err: errors.New("no Landlock: ABI 0")}
			}
			return confine.Support{ABI: abi}
		}
		err := c.Validate()
		switch {
		case abi >= confine.RequiredABI() && err != nil:
			t.Errorf("ABI %d: %v, want accepted", abi, err)
		case abi > 0 && abi < confine.RequiredABI() && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "ABI 6 or later") ||
			!strings.Contains(err.Error(), "Landlock ABI is "+string(rune('0'+abi)))):
			t.Errorf("ABI %d: %v, want a refusal naming ABI 6 and ABI %d", abi, err, abi)
		case abi == 0 && !errors.Is(err, ErrInvalidConfig):
			t.Errorf("no Landlock: %v, want refused", err)
		}
	}
}
