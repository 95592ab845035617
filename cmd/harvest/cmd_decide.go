package main

import "github.com/urfave/cli/v2"

// decideCommand is a placeholder until its issue lands; it fails loudly.
func decideCommand() *cli.Command {
	return &cli.Command{
		Name:   "decide",
		Usage:  "(not built yet)",
		Hidden: true,
		Action: func(*cli.Context) error { return cli.Exit("harvest decide: not built yet", 2) },
	}
}
