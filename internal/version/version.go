// Package version holds the build's version, set with -ldflags at build time
// (scripts/package.sh stamps both).
package version

import "runtime/debug"

// Version is overridden by `-ldflags "-X .../internal/version.Version=v1.2.3"`.
var Version = "0.1.0-dev"

// Commit is the git commit the binary was built from, when known: stamped
// with -ldflags, else what `go build` in a git checkout recorded.
var Commit = ""

// String is "VERSION (COMMIT)", or VERSION when the commit is unknown.
func String() string {
	c := Commit
	if c == "" {
		c = vcsCommit(debug.ReadBuildInfo())
	}
	if c == "" {
		return Version
	}
	return Version + " (" + c + ")"
}

// vcsCommit is the commit go build recorded (12 digits, "-dirty" when the
// tree had changes), or "".
func vcsCommit(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
