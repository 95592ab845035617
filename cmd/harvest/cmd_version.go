package main

import (
	"fmt"
	"runtime"

	"github.com/harvest-hpc/harvest/internal/version"
	"github.com/urfave/cli/v2"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version of harvest",
		Action: func(c *cli.Context) error {
			fmt.Fprintf(c.App.Writer, "harvest %s %s %s/%s\n", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
