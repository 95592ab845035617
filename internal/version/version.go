// Package version holds the build's version, set with -ldflags at build time.
package version

// Version is overridden by `-ldflags "-X .../internal/version.Version=v1.2.3"`.
var Version = "0.1.0-dev"

// Commit is the git commit the binary was built from, when known.
var Commit = ""
