// Command airlock-agent is the microvm tier's guest /init. It is built
// static (CGO_ENABLED=0) and placed in the guest's initramfs; it is not
// meant to run on a host.
package main

import "github.com/airlock-sandbox/airlock/tiers/microvm/internal/agent"

func main() { agent.Main() }
