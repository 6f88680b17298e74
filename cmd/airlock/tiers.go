package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/internal/jobs"
)

func init() {
	register(&command{
		name:    "tiers",
		summary: "list the tiers, their isolation levels, and whether each can run here (and why not)",
		usage:   "tiers [--json]",
		run:     tiersCmd,
	})
}

type tierInfo struct {
	Name      string `json:"name"`
	Level     int    `json:"level"`
	LevelName string `json:"level_name"`
	Available bool   `json:"available"`
	Why       string `json:"why_not,omitempty"`
}

func tiersCmd(ctx context.Context, e *env) int {
	c := commands["tiers"]
	fs := e.flags(c)
	var rf routerFlags
	rf.register(fs)
	jsonMode := fs.Bool("json", false, "write the list as JSON")
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if len(pos)+len(rest) > 0 {
		return e.fail(jobs.Invalid("", "%s takes no arguments (see `airlock help %s`)", "tiers", "tiers"))
	}
	r, closeAll, err := rf.openAll()
	if err != nil {
		return e.fail(err)
	}
	defer closeAll()
	var infos []tierInfo
	for _, t := range r.Tiers() {
		info := tierInfo{Name: t.Name(), Level: int(t.Level()), LevelName: t.Level().String(), Available: true}
		if err := r.Unavailable(t.Name()); err != nil {
			info.Available, info.Why = false, err.Error()
		}
		infos = append(infos, info)
	}
	if *jsonMode {
		if err := writeJSON(e.stdout, infos); err != nil {
			return e.fail(err)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tLEVEL\tAVAILABLE\tWHY NOT")
	for _, i := range infos {
		avail := "yes"
		if !i.Available {
			avail = "no"
		}
		fmt.Fprintf(tw, "%s\t%d %s\t%s\t%s\n", i.Name, i.Level, i.LevelName, avail, i.Why)
	}
	tw.Flush()
	return exitOK
}
