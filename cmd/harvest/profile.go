package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"

	"github.com/harvest-hpc/harvest/internal/safefs"
)

// startProfiles starts a CPU profile written to DIR/NAME.cpu.pprof; the
// returned stop ends it and writes the process's allocations to
// DIR/NAME.allocs.pprof (go tool pprof -sample_index=alloc_space). An
// empty dir profiles nothing.
func startProfiles(dir, name string) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := safefs.SharedDir(dir); err != nil { // files are made there by name
		return nil, fmt.Errorf("profile directory: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	runtime.MemProfileRate = 64 << 10 // finer than the default 512 KiB: a short bench run allocates too little to be sampled well
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		a, err := os.Create(filepath.Join(dir, name+".allocs.pprof"))
		if err != nil {
			return fmt.Errorf("allocation profile: %w", err)
		}
		if err := pprof.Lookup("allocs").WriteTo(a, 0); err != nil {
			a.Close()
			return fmt.Errorf("allocation profile: %w", err)
		}
		return a.Close()
	}, nil
}

// startTrace writes a Go execution trace of this process to path until
// the returned stop.
func startTrace(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	return func() error {
		trace.Stop()
		if err := f.Close(); err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		return nil
	}, nil
}
