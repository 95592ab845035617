package version

import (
	"runtime/debug"
	"testing"
)

func TestStringPrefersTheStampedCommit(t *testing.T) {
	oldV, oldC := Version, Commit
	defer func() { Version, Commit = oldV, oldC }()
	Version, Commit = "1.2.3", "abcdef012345"
	if got := String(); got != "1.2.3 (abcdef012345)" {
		t.Errorf("String() = %q", got)
	}
}

func TestVCSCommitFromTheBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	if got := vcsCommit(bi, true); got != "0123456789ab-dirty" {
		t.Errorf("got %q", got)
	}
	bi.Settings[1].Value = "false"
	if got := vcsCommit(bi, true); got != "0123456789ab" {
		t.Errorf("got %q", got)
	}
	if got := vcsCommit(&debug.BuildInfo{}, true); got != "" {
		t.Errorf("no revision gave %q", got)
	}
	if got := vcsCommit(nil, false); got != "" {
		t.Errorf("no build info gave %q", got)
	}
}
