package main

import "github.com/urfave/cli/v2"

// simCommand is a placeholder until its issue lands; it fails loudly.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:   "sim",
		Usage:  "(not built yet)",
		Hidden: true,
		Action: func(*cli.Context) error { return cli.Exit("harvest sim: not built yet", 2) },
	}
}
