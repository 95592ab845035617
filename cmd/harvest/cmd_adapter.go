package main

import "github.com/urfave/cli/v2"

func adapterCommand() *cli.Command {
	return &cli.Command{
		Name:   "adapter",
		Usage:  "(not built yet)",
		Hidden: true,
		Action: func(*cli.Context) error { return cli.Exit("not built yet", 2) },
	}
}
