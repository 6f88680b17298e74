package main

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/tiers/microvm"
)

func init() {
	register(&command{
		name:    "microvm",
		summary: "show the microVM tier's backend, accelerator, guest kernel and QEMU's user; sweep orphaned VMs",
		usage:   "microvm [status|sweep]",
		run:     runMicroVM,
	})
}

// runMicroVM reports the tier's state. Building the tier sweeps VMs whose
// owning process has gone, so `sweep` is `status` said out loud.
func runMicroVM(ctx context.Context, e *env) int {
	c := commands["microvm"]
	fs := e.flags(c)
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	pos = append(pos, rest...)
	switch {
	case len(pos) == 1 && pos[0] != "status" && pos[0] != "sweep":
		return e.fail(jobs.Invalid("", "unknown subcommand %q: want status or sweep (see `airlock help microvm`)", pos[0]))
	case len(pos) > 1:
		return e.fail(jobs.Invalid("", "microvm takes at most one subcommand, status or sweep (see `airlock help microvm`)"))
	}
	tier, err := microvm.New(microvm.DefaultConfig())
	if err != nil {
		return e.fail(err)
	}
	defer tier.Close()
	if err := tier.Available(); err != nil {
		fmt.Fprintf(e.stdout, "microvm: unavailable: %v\n", err)
		return exitNotAdmitted
	}
	fmt.Fprintf(e.stdout, "microvm: available\nbackend: %s\naccelerator: %s\nguest kernel: %s\nQEMU runs as: %s\nQEMU namespaces: %s\n",
		tier.Backend(), tier.Accelerator(), tier.GuestKernel(), tier.VMMUser(), tier.VMMNamespaces())
	return exitOK
}
