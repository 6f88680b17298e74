package microvm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cpio"
	"github.com/airlock-sandbox/airlock/internal/replacefile"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/tools"
)

// assets are the files a VM boots from.
type assets struct {
	qemu    string // qemu-system-x86_64
	kernel  string // uncompressed vmlinux
	initrd  string // the base initramfs: agent, busybox, modules
	release string // the guest kernel's release, e.g. 6.1.0-47-cloud-amd64
	digest  string // of everything above: keys snapshots
}

// findAssets locates QEMU, the kernel, the guest root and the agent (the
// Config's paths first, then the project's .tools/microvm), and builds the
// base initramfs into the cache directory if it is not there yet.
func findAssets(c Config) (*assets, error) {
	a := &assets{qemu: c.qemu, kernel: c.kernel}
	var err error
	// A kernel named in the configuration is checked first: that mistake
	// is reported as such, whatever else is missing on this machine.
	if a.kernel != "" {
		if _, err := os.Stat(a.kernel); err != nil {
			return nil, fmt.Errorf("guest kernel: %w", err)
		}
	}
	if a.qemu == "" {
		if a.qemu, err = tools.Find("qemu-system-x86_64"); err != nil {
			return nil, err
		}
	}
	if a.kernel == "" {
		if a.kernel, err = tools.File("AIRLOCK_MICROVM_KERNEL", "microvm/vmlinux"); err != nil {
			return nil, err
		}
	}
	root := c.rootfs
	if root == "" {
		if root, err = tools.File("AIRLOCK_MICROVM_ROOTFS", "microvm/rootfs"); err != nil {
			return nil, err
		}
	}
	agent := c.agent
	if agent == "" {
		if agent, err = tools.File("AIRLOCK_MICROVM_AGENT", "microvm/airlock-agent"); err != nil {
			return nil, fmt.Errorf("guest agent: %w", err)
		}
	}
	rel, err := os.ReadFile(filepath.Join(root, "etc/kernel-release"))
	if err != nil {
		return nil, fmt.Errorf("guest root %s is incomplete (run scripts/setup-microvm.sh): %w", root, err)
	}
	a.release = strings.TrimSpace(string(rel))
	if a.initrd, err = buildInitramfs(c.cacheDir, root, agent); err != nil {
		return nil, fmt.Errorf("building the initramfs: %w", err)
	}
	h := sha256.New()
	for _, p := range []string{a.qemu, a.kernel, a.initrd} {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
	}
	a.digest = hex.EncodeToString(h.Sum(nil))[:24]
	return a, nil
}

// buildInitramfs writes <cache>/base-<digest>.cpio: the agent as /init,
// busybox with a link per applet, the modules and their load order, and
// the few files and device nodes a root needs. The digest covers every
// input, so a rebuilt agent yields a new archive.
func buildInitramfs(cacheDir, root, agentPath string) (string, error) {
	agent, err := os.ReadFile(agentPath)
	if err != nil {
		return "", err
	}
	busybox, err := os.ReadFile(filepath.Join(root, "bin/busybox"))
	if err != nil {
		return "", err
	}
	order, err := os.ReadFile(filepath.Join(root, "etc/modules.order"))
	if err != nil {
		return "", err
	}
	release, _ := os.ReadFile(filepath.Join(root, "etc/kernel-release"))
	h := sha256.New()
	h.Write(agent)
	h.Write(busybox)
	h.Write(order)
	mods := map[string][]byte{}
	for _, m := range strings.Fields(string(order)) {
		b, err := os.ReadFile(filepath.Join(root, "lib/modules", m))
		if err != nil {
			return "", err
		}
		mods[m] = b
		h.Write(b)
	}
	// A cached initramfs is what the guest boots: it is used only from a
	// directory nobody else could have written it into.
	if _, err := statedir.Ensure(cacheDir, 0o700); err != nil {
		return "", err
	}
	out := filepath.Join(cacheDir, "base-"+hex.EncodeToString(h.Sum(nil))[:24]+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	applets, err := busyboxApplets(filepath.Join(root, "bin/busybox"))
	if err != nil {
		return "", err
	}
	err = replacefile.Fill(out, 0o600, func(w io.Writer) error {
		c := cpio.NewWriter(w)
		for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "proc", "sys", "tmp", "scratch", "etc", "lib", "lib/modules", "root", "run", "var"} {
			c.Add(cpio.Entry{Name: d, Mode: cpio.Dir | 0o755})
		}
		c.Add(cpio.Entry{Name: "dev/console", Mode: cpio.Char | 0o600, RMajor: 5, RMinor: 1})
		c.Add(cpio.Entry{Name: "dev/null", Mode: cpio.Char | 0o666, RMajor: 1, RMinor: 3})
		c.Add(cpio.Entry{Name: "init", Mode: cpio.File | 0o700, Data: agent})
		c.Add(cpio.Entry{Name: "bin/busybox", Mode: cpio.File | 0o755, Data: busybox})
		for _, app := range applets {
			if app == "busybox" || app == "init" || app == "linuxrc" {
				continue
			}
			c.Add(cpio.Entry{Name: "bin/" + app, Mode: cpio.Symlink | 0o777, Data: []byte("busybox")})
		}
		c.Add(cpio.Entry{Name: "etc/modules.order", Mode: cpio.File | 0o644, Data: order})
		c.Add(cpio.Entry{Name: "etc/kernel-release", Mode: cpio.File | 0o644, Data: release})
		c.Add(cpio.Entry{Name: "etc/passwd", Mode: cpio.File | 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/scratch:/bin/sh\n")})
		c.Add(cpio.Entry{Name: "etc/group", Mode: cpio.File | 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")})
		for _, m := range slices.Sorted(maps.Keys(mods)) {
			c.Add(cpio.Entry{Name: "lib/modules/" + m, Mode: cpio.File | 0o644, Data: mods[m]})
		}
		return c.Close()
	})
	if err != nil {
		return "", err
	}
	return out, nil
}

// busyboxApplets asks the (static) busybox for its applet names.
func busyboxApplets(busybox string) ([]string, error) {
	var out bytes.Buffer
	cmd := exec.Command(busybox, "--list")
	cmd.Stdout = &out
	cmd.Env = []string{}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("listing busybox applets: %w", err)
	}
	names := strings.Fields(out.String())
	if len(names) == 0 {
		return nil, errors.New("busybox lists no applets")
	}
	return names, nil
}
