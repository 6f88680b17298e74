package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/gvisor"
	"github.com/airlock-sandbox/airlock/tiers/microvm"
	"github.com/airlock-sandbox/airlock/tiers/process"
)

// TestEveryGrant runs one job that uses every grant a tier below level 5
// gives — a host directory to read, a scratch size, spawn, egress to a
// loopback origin, a secret — with placed files, a plain env and stdin, in the common
// image, on the process tier, gVisor and the microVM, and expects the same
// standard output and exit status from each. (A pinned clock is not in
// it: the contract refuses one on the tiers that cannot show it, as the
// clock-pinned case checks; credentials are level 5's alone.)
func TestEveryGrant(t *testing.T) {
	s := store(t)
	needImage(t, s, "python")
	o := egresstest.StartOrigin(t, "origin.test")
	eg := egress.Config{Hosts: o.Pins}

	// Under the suite's directory, which the process tier's unprivileged
	// stages can traverse.
	grant, err := os.MkdirTemp(testDir, "grant-")
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.Chmod(grant, 0o755))
	must(t, os.MkdirAll(filepath.Join(grant, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(grant, "sub", "data.txt"), []byte("granted data\n"), 0o644))
	must(t, os.Symlink("sub/data.txt", filepath.Join(grant, "link")))

	script := strings.Join([]string{
		"import errno, os, shutil, socket, subprocess, sys, urllib.request",
		"g = sys.argv[1]",
		// The read grant: a nested file and a link inside the directory,
		// read-only.
		"print(open(g + '/sub/data.txt').read().strip(), open(g + '/link').read().strip())",
		"print(sorted(os.listdir(g)))",
		"try:\n    open(g + '/planted', 'w')\n    print('grant writable')\nexcept OSError:\n    print('grant read-only')",
		// The secret, the plain env, stdin and a placed file.
		"print(os.environ['TOKEN'], os.environ['MODE'], sys.stdin.read().strip(), open('in/note.txt').read().strip())",
		// The scratch: writable within scratch_mb, and no further.
		"open('four.bin', 'wb').write(b'x' * (4 << 20))",
		"try:\n    open('big.bin', 'wb').write(b'x' * (32 << 20))\n    print('scratch uncapped')\nexcept OSError:\n    print('scratch capped')",
		"os.remove('big.bin')",
		"print('scratch total', shutil.disk_usage('.').total <= 16 << 20)",
		// Spawn: another binary of the image.
		"print(subprocess.run(['cat', 'in/note.txt'], capture_output=True, text=True).stdout.strip())",
		// Egress through the tier's proxy to the allowed origin.
		"print(urllib.request.urlopen('http://origin.test:" + o.Port + "/ok', timeout=30).read().decode().strip())",
		// Around the proxy: an address directly, and a name through DNS.
		"s = socket.socket()\ns.settimeout(10)\ntry:\n    s.connect(('192.0.2.1', 80))\n    print('direct connected')\nexcept socket.timeout:\n    print('direct timed out')\nexcept OSError as e:\n    print('direct', errno.errorcode.get(e.errno))",
		"try:\n    print('dns', socket.getaddrinfo('example.com', 80)[0][4][0])\nexcept socket.gaierror as e:\n    print('dns refused')",
	}, "\n")
	job := airlock.Job{
		Kind:  airlock.KindCommand,
		Image: "python",
		Argv:  []string{"python3", "-c", script, grant},
		Stdin: "from stdin\n",
		Files: map[string]string{"in/note.txt": "placed file\n"},
		Env:   map[string]string{"MODE": "every"},
		Grants: airlock.Grants{
			FS:      airlock.FSGrant{Read: []string{grant}, ScratchMB: 16},
			Spawn:   true,
			Net:     []airlock.NetRule{o.Rule("origin.test")},
			Secrets: map[string]string{"TOKEN": "t0k"},
		},
		Limits: airlock.Limits{WallMS: 120000},
	}
	want := strings.Join([]string{
		"granted data granted data",
		"['link', 'sub']",
		"grant read-only",
		"t0k every from stdin placed file",
		"scratch capped",
		"scratch total True",
		"placed file",
		"origin says hello",
		"direct ENETUNREACH",
		"dns refused",
	}, "\n") + "\n"

	tiers := []struct {
		name string
		open func(*image.Store) (closingTier, error)
	}{
		{process.NameContainer, func(st *image.Store) (closingTier, error) {
			return process.New(process.NewConfig().
				WithBaseDir(filepath.Join(testDir, "grants-process-base")).
				WithWorkspaceDir(filepath.Join(testDir, "grants-process-ws")).
				WithUIDRange(1<<30+2<<20, 1<<12).
				WithImages(st).WithEgress(eg))
		}},
		{gvisor.Name, func(st *image.Store) (closingTier, error) {
			return gvisor.New(gvisor.NewConfig().WithDir(filepath.Join(testDir, "grants-gvisor")).WithImages(st).WithEgress(eg))
		}},
		{microvm.Name, func(st *image.Store) (closingTier, error) {
			agent, err := guestAgent()
			if err != nil {
				return nil, err
			}
			// A job granted egress or a host path boots cold.
			return microvm.New(microvm.DefaultConfig().WithAgent(agent).
				WithCacheDir(filepath.Join(testDir, "grants-microvm-cache")).
				WithStateDir(filepath.Join(testDir, "grants-microvm-state")).
				WithImages(st).WithEgress(eg))
		}},
	}
	for _, ot := range tiers {
		t.Run(ot.name, func(t *testing.T) {
			tr, err := ot.open(s)
			if err != nil {
				t.Fatalf("building %s: %v", ot.name, err)
			}
			defer tr.Close()
			if p, ok := tr.(airlock.Prober); ok {
				if err := p.Available(); err != nil {
					tiertest.Unavailable(t, ot.name, err)
				}
			}
			gets := o.Hits("GET")
			res, err := run(tr, job)
			if err != nil {
				t.Fatalf("%v\nstdout: %q\nstderr: %q", err, res.Stdout, res.Stderr)
			}
			if res.ExitCode != 0 || res.Stdout != want {
				t.Errorf("exit %d, stdout:\n%s\nwant exit 0, stdout:\n%s\nstderr: %q", res.ExitCode, res.Stdout, want, res.Stderr)
			}
			if n := o.Hits("GET") - gets; n != 1 {
				t.Errorf("the origin saw %d GETs from the run, want 1", n)
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(grant, "planted")); !os.IsNotExist(err) {
		t.Errorf("a file was planted in the granted directory: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
