package main

import (
	"io"
	"reflect"
	"testing"

	"github.com/harvest-hpc/harvest/agent"
	"github.com/harvest-hpc/harvest/agent/policy"
	"github.com/urfave/cli/v2"
)

// The flags' defaults are read from DefaultConfig: with no flag given,
// the configuration the agent runs with is DefaultConfig itself.
func TestAgentFlagDefaultsAreAgentDefaultConfig(t *testing.T) {
	cfg, _, err := parseAgent(t)
	if err != nil {
		t.Fatal(err)
	}
	if want := agent.DefaultConfig(); !reflect.DeepEqual(cfg, want) {
		t.Fatalf("agent with no flags runs with\n %+v\nwant agent.DefaultConfig()\n %+v", cfg, want)
	}
}

func TestDecideFlagDefaultsArePolicyDefaultConfig(t *testing.T) {
	app := newApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	var cfg policy.Config
	var cfgErr error
	for _, c := range app.Commands {
		if c.Name == "decide" {
			c.Action = func(c *cli.Context) error {
				cfg, cfgErr = decideConfig(c, nil)
				return nil
			}
		}
	}
	if err := app.Run([]string{"harvest", "decide"}); err != nil || cfgErr != nil {
		t.Fatal(err, cfgErr)
	}
	if want := policy.DefaultConfig(); !reflect.DeepEqual(cfg, want) {
		t.Fatalf("decide with no flags decides with\n %+v\nwant policy.DefaultConfig()\n %+v", cfg, want)
	}
}
