package confine

import "testing"

// TestRequiredABI: what restrict asks for needs Landlock ABI 6 (scoping).
func TestRequiredABI(t *testing.T) {
	if got := RequiredABI(); got != 6 {
		t.Fatalf("RequiredABI() = %d, want 6", got)
	}
}
