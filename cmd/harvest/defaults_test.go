package main

import (
	"fmt"
	"io"
	"reflect"
	"strings"
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

// harvest decide decides as the agent does: with no flag, its settings
// are the agent's (its idle margin was the policy's 0 against the agent's
// 1, so one snapshot got two answers), and --help says the default.
func TestDecideFlagDefaultsAreTheAgents(t *testing.T) {
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
	if want := agent.DefaultConfig().Policy; !reflect.DeepEqual(cfg, want) {
		t.Fatalf("decide with no flags decides with\n %+v\nwant agent.DefaultConfig().Policy\n %+v", cfg, want)
	}
	help, _, _ := runHarvest(t, "", "decide", "--help")
	if want := fmt.Sprintf("(default: %d)", agent.DefaultConfig().Policy.IdleMargin); !strings.Contains(help, want) {
		t.Errorf("decide --help does not give the idle margin's default %s:\n%s", want, help)
	}
}
