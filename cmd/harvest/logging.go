package main

import (
	"io"
	"log/slog"
	"strings"
)

// newLogger returns a key/value logger at the given level ("debug",
// "info", "warn", "error"), as JSON when asked (for log shippers).
func newLogger(w io.Writer, level string, asJSON bool) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn", "warning":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if asJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
