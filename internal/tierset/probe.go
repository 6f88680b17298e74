package tierset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// The probes answer as the built tiers' Available does, from the checks
// that cost no more than a stat: what the build itself would find (a state
// directory that cannot be made, say) is found when the tier is built, and
// then refuses the job (see Lazy). TestLazyMatchesBuilt holds each probe
// to its built tier's answer.

// processProbe is the process tiers' host check (root, cgroups, Landlock,
// namespaces), which reads no tier state: it is asked through a nil tier,
// and runs once per process.
func processProbe(Options) error { return (*process.Tier)(nil).Available() }

// gvisorProbe is what gVisor's build checks before it touches its
// directory (and sweeps it): runsc, root, the cgroup v1 memory hierarchy.
func gvisorProbe(Options) error {
	if _, err := tools.Find("runsc"); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("runsc needs root (rootless sandboxes are not supported by this tier)")
	}
	const mem = "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(mem, "memory.limit_in_bytes")); err != nil {
		return errors.New("no cgroup v1 memory hierarchy at " + mem + " (cgroup v2 is not supported yet)")
	}
	return nil
}

// microvmProbe finds QEMU, the guest kernel, root and agent as the
// microVM tier's build does, without building its initramfs or probing
// KVM.
func microvmProbe(Options) error {
	wrap := func(err error) error { return fmt.Errorf("microvm: %w", err) }
	if _, err := tools.Find("qemu-system-x86_64"); err != nil {
		return wrap(err)
	}
	if _, err := tools.File("AIRLOCK_MICROVM_KERNEL", "microvm/vmlinux"); err != nil {
		return wrap(err)
	}
	root, err := tools.File("AIRLOCK_MICROVM_ROOTFS", "microvm/rootfs")
	if err != nil {
		return wrap(err)
	}
	if _, err := tools.File("AIRLOCK_MICROVM_AGENT", "microvm/airlock-agent"); err != nil {
		return wrap(fmt.Errorf("guest agent: %w", err))
	}
	if _, err := os.Stat(filepath.Join(root, "etc/kernel-release")); err != nil {
		return wrap(fmt.Errorf("guest root %s is incomplete (run scripts/setup-microvm.sh): %w", root, err))
	}
	return nil
}

// accountProbe is the account tier's check: an account is selected and
// its executor's socket exists.
func accountProbe(o Options) error { return o.accountTier().Available() }
