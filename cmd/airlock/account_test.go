package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/tiers/account"
)

// localAccount is a real account for a test: its OS user, directories,
// credential store and running executor, made with the real binary and
// removed at the end (user, directories, processes).
type localAccount struct {
	bin, dir, name string
	rec            account.Record
	value          string // the credential github-readonly's value
	env            []string
}

func (a *localAccount) cmd(ctx context.Context, stdin string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, a.bin, args...)
	c.Env = a.env
	c.Stdin = strings.NewReader(stdin)
	c.Dir = a.dir
	return c
}

func (a *localAccount) run(t testing.TB, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := a.cmd(ctx, stdin, args...)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("airlock %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// needAccountHost skips (fails under CI) where a level-5 account cannot
// be made: not root, no useradd or setpriv, no microVM to run inside it.
func needAccountHost(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "an account's OS user is made with useradd, which needs root")
	}
	for _, p := range []string{"useradd", "userdel", "setpriv"} {
		if _, err := exec.LookPath(p); err != nil {
			testenv.Skipf(t, "%s not found: %v", p, err)
		}
	}
	for _, e := range tierset.Entries() {
		if e.Name == "microvm" {
			if err := e.Probe(tierset.Options{}); err != nil {
				testenv.Skipf(t, "the account's inner tier: %v", err)
			}
		}
	}
}

// openDir makes dir and its parents up to the root traversable by the
// account's user (test directories are made 0700).
func openDir(t testing.TB, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o005 != 0o005 {
			if err := os.Chmod(d, st.Mode().Perm()|0o005); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// buildBinary builds the real airlock binary where the account's user
// can run it.
func buildBinary(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-acct-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	openDir(t, dir)
	bin := filepath.Join(dir, "airlock")
	c := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	c.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("building airlock: %v\n%s", err, out)
	}
	return bin
}

// newLocalAccount makes and starts an account; addArgs go to its
// `airlock account add`.
func newLocalAccount(t testing.TB, addArgs ...string) *localAccount {
	t.Helper()
	needAccountHost(t)
	bin := buildBinary(t)
	dir, err := os.MkdirTemp("", "airlock-acct-")
	if err != nil {
		t.Fatal(err)
	}
	openDir(t, dir)
	var rb [3]byte
	rand.Read(rb[:])
	a := &localAccount{bin: bin, dir: dir, name: "t" + hex.EncodeToString(rb[:])}
	toolsDir, _ := filepath.Abs(tools.Dir())
	a.env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir,
		"AIRLOCK_ACCOUNTS=" + dir, "AIRLOCK_ACCOUNT=" + a.name, "AIRLOCK_TOOLS=" + toolsDir}
	t.Cleanup(func() {
		// rm stops the executor, kills what its user runs, deletes the
		// user and its directories; then nothing of it may be left.
		out, errOut, code := a.run(t, "", "account", "rm", a.name)
		if code != 0 {
			t.Errorf("account rm: %d %s %s", code, out, errOut)
		}
		if _, err := user.Lookup(account.UserName(a.name)); err == nil {
			t.Errorf("user %s left behind", account.UserName(a.name))
		}
		if a.rec.UID > 0 {
			if pids := processesOf(a.rec.UID); len(pids) > 0 {
				t.Errorf("processes of uid %d left behind: %v", a.rec.UID, pids)
			}
		}
		os.RemoveAll(dir)
	})
	if out, errOut, code := a.run(t, "", append([]string{"account", "add", a.name}, addArgs...)...); code != 0 {
		t.Fatalf("account add: %d %s %s", code, out, errOut)
	}
	// Idempotent.
	if out, errOut, code := a.run(t, "", append([]string{"account", "add", a.name}, addArgs...)...); code != 0 {
		t.Fatalf("account add again: %d %s %s", code, out, errOut)
	}
	if a.rec, err = account.Load(dir, a.name); err != nil {
		t.Fatal(err)
	}
	a.value = "ghs_" + hex.EncodeToString(rb[:]) + "Zq9x" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if out, errOut, code := a.run(t, a.value+"\n", "account", "set", a.name, "github-readonly"); code != 0 || strings.Contains(out+errOut, a.value) {
		t.Fatalf("account set: %d %s %s", code, out, errOut)
	}
	if out, errOut, code := a.run(t, "", "account", "start", a.name); code != 0 {
		log, _ := os.ReadFile(filepath.Join(a.rec.Home(), "executor.log"))
		t.Fatalf("account start: %d %s %s\n%s", code, out, errOut, log)
	}
	return a
}

// processesOf lists the pids that uid runs.
func processesOf(uid int) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := os.Stat("/proc/" + e.Name()); err == nil && int(st.Sys().(*syscall.Stat_t).Uid) == uid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// noProcessesOf waits, bounded, until uid runs nothing.
func noProcessesOf(t *testing.T, uid int) {
	t.Helper()
	for range 100 {
		if len(processesOf(uid)) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("uid %d still runs %v", uid, processesOf(uid))
}

// TestAccountLevel5 runs level-5 jobs through a real local account: its
// own OS user, an executor reached over a peer-checked Unix socket, a
// microVM inside it.
func TestAccountLevel5(t *testing.T) {
	// The executor also serves over mutual TLS on loopback, for the
	// remote-mtls subtest.
	addr := freeLoopback(t)
	// Core dumps allowed to the processes this test starts, so that
	// no-core-dumps sees the executor's own limit.
	var core syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &core); err == nil {
		if syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{Cur: ^uint64(0), Max: ^uint64(0)}) == nil {
			t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_CORE, &core) })
		}
	}
	a := newLocalAccount(t, "--listen", addr)

	t.Run("done-when", func(t *testing.T) {
		out, errOut, code := a.run(t, "", "run", "--situation", "credentials", "--credential", "GITHUB_TOKEN=github-readonly", "--",
			"sh", "-c", `test -n "$GITHUB_TOKEN" && echo ok`)
		if code != 0 || out != "ok\n" {
			t.Fatalf("code %d stdout %q stderr %q", code, out, errOut)
		}
	})

	t.Run("no-core-dumps", func(t *testing.T) {
		// The executor holds resolved values, its VMs the jobs' memory:
		// neither may dump core (the VMs inherit the executor's limit).
		data, err := a.rec.ReadPid()
		if err != nil {
			t.Fatal(err)
		}
		limits, err := os.ReadFile("/proc/" + strings.TrimSpace(data) + "/limits")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(limits), "\n") {
			if f := strings.Fields(line); strings.HasPrefix(line, "Max core file size") && (len(f) < 6 || f[4] != "0" || f[5] != "0") {
				t.Errorf("the executor may dump core: %q", line)
			}
		}
	})

	t.Run("tiers-and-explain", func(t *testing.T) {
		out, _, _ := a.run(t, "", "tiers")
		if !strings.Contains(out, "account") || !strings.Contains(out, "5 account") {
			t.Errorf("tiers:\n%s", out)
		}
		out, _, code := a.run(t, "", "explain", "--situation", "credentials")
		if code != 0 || !strings.Contains(out, "chosen:    account") || !strings.Contains(out, "account:   "+a.name) {
			t.Errorf("explain: %d\n%s", code, out)
		}
	})

	t.Run("no-value-leaks", func(t *testing.T) {
		// The caller's own server, with an audit file, routes to the
		// account tier; the program prints the value every way it can.
		audit := filepath.Join(t.TempDir(), "audit.jsonl")
		srv, err := server.New(server.Config{Audit: audit, Tenants: []server.Tenant{{Name: "t", KeySHA256: server.HashKey("k"),
			Situation: airlock.SituationCredentials, Accounts: []string{a.name}}}}, []airlock.Tier{account.New(account.NewConfig(a.name, a.rec.Socket(), a.rec.UID))}, server.Options{})
		if err != nil {
			t.Fatal(err)
		}
		script := `echo "$T"; echo "$T" | base64; printf %s "$T" | od -An -tx1 | tr -d ' \n'; echo; echo "$T" >&2; echo "x$T" > out.txt`
		job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", script}, Situation: airlock.SituationCredentials,
			Collect: []string{"out.txt"}, Grants: airlock.Grants{Spawn: true, Credentials: []airlock.Credential{{Env: "T", Ref: "github-readonly"}}}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := srv.Router().Run(ctx, job)
		srv.Close()
		if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, account.Redacted) {
			t.Fatalf("run: %v %+v", err, res)
		}
		body, _ := os.ReadFile(audit)
		resJSON, _ := res.MarshalJSON()
		log, _ := os.ReadFile(filepath.Join(a.rec.Home(), "executor.log"))
		execAudit, _ := os.ReadFile(filepath.Join(a.rec.Home(), "audit.jsonl"))
		for _, form := range []string{a.value, hex.EncodeToString([]byte(a.value)), base64.StdEncoding.EncodeToString([]byte(a.value))[:len(a.value)]} {
			for what, text := range map[string]string{"result": string(resJSON), "caller's audit": string(body), "executor's log": string(log), "executor's audit": string(execAudit)} {
				if strings.Contains(text, form) {
					t.Errorf("the %s holds the credential (%q)", what, form)
				}
			}
		}
		if !strings.Contains(strings.Join(res.Decision, "\n"), "account "+a.name) {
			t.Errorf("decision names no account: %q", res.Decision)
		}
		// Nor is it left in any file of the account's but its store
		// (the VMs' state, their scratch, caches) once the job is done.
		filepath.WalkDir(a.rec.Home(), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() || p == a.rec.StorePath() {
				return nil
			}
			if data, _ := os.ReadFile(p); bytes.Contains(data, []byte(a.value)) || bytes.Contains(data, []byte(hex.EncodeToString([]byte(a.value)))) {
				t.Errorf("%s holds the credential after the job", p)
			}
			return nil
		})
	})

	t.Run("set-refuses-a-value-it-would-cut", func(t *testing.T) {
		big := strings.Repeat("v", 1<<20+1)
		out, errOut, code := a.run(t, big, "account", "set", a.name, "too-long")
		if code == 0 || !strings.Contains(errOut, "longer than 1048576 bytes") || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("a value of %d bytes: code %d stdout %q stderr %q", len(big), code, out, errOut)
		}
		if data, err := os.ReadFile(a.rec.StorePath()); err != nil || strings.Contains(string(data), "too-long") {
			t.Errorf("the store holds the cut value (%v)", err)
		}
	})

	t.Run("nothing-left-for-the-next-job", func(t *testing.T) {
		// A job holding the credential leaves it everywhere a later job
		// (another tenant's, of another caller) could look: files in /tmp
		// and /dev/shm, a SysV shared memory segment, an abstract Unix
		// socket, and a process kept alive by setsid and a double fork.
		// The next job of the account finds none of it, and the account's
		// user runs only the executor once the first job is done.
		// The guest's host view may lack ipcmk and python3: the shared
		// memory segment and the abstract socket are made where it has
		// them (each VM has a kernel of its own, so none outlives it).
		plant := `printf %s "$T" > /tmp/leftmark; printf %s "$T" > /dev/shm/leftmark
(command -v ipcmk >/dev/null && ipcmk -M 4096) >/dev/null 2>&1
(command -v python3 >/dev/null && python3 -c 'import socket,os,time
s=socket.socket(socket.AF_UNIX); s.bind("\\0leftmark-"+os.environ["T"]); s.listen(1)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0: time.sleep(600)
') >/dev/null 2>&1 &
(setsid sh -c 'exec sleep 6000' </dev/null >/dev/null 2>&1 &)
sleep 1; ls /tmp /dev/shm; ps -o args 2>/dev/null || ps`
		out, errOut, code := a.run(t, "", "run", "--situation", "credentials", "--credential", "T=github-readonly", "--allow-spawn", "--", "sh", "-c", plant)
		if code != 0 || strings.Count(out, "\nleftmark\n") != 2 || !strings.Contains(out, "\nsleep 6000\n") {
			t.Fatalf("planting: code %d stdout %q stderr %q", code, out, errOut)
		}
		look := `ls -a /tmp /dev/shm; cat /proc/net/unix; ipcs -m 2>/dev/null; ps -o args 2>/dev/null || ps`
		out, errOut, code = a.run(t, "", "run", "--situation", "credentials", "--allow-spawn", "--", "sh", "-c", look)
		if code != 0 {
			t.Fatalf("looking: code %d stdout %q stderr %q", code, out, errOut)
		}
		for _, left := range []string{"leftmark", a.value, "sleep 6000", "0x0"} {
			if strings.Contains(out+errOut, left) {
				t.Errorf("the next job finds %q:\n%s%s", left, out, errOut)
			}
		}
		// The executor alone (no VM, no process the job started).
		data, err := a.rec.ReadPid()
		if err != nil {
			t.Fatal(err)
		}
		exe, _ := strconv.Atoi(strings.TrimSpace(data))
		for i := 0; i < 100; i++ {
			if pids := processesOf(a.rec.UID); len(pids) == 1 && pids[0] == exe {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("the account's user runs %v, more than its executor (%d)", processesOf(a.rec.UID), exe)
	})

	t.Run("canaries", func(t *testing.T) {
		// The caller's file (0600), its environment and its socket.
		cdir, err := os.MkdirTemp("", "airlock-canary-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(cdir)
		openDir(t, cdir)
		fileSecret, envSecret, sockSecret := "canary-file-"+a.name, "canary-env-"+a.name, "canary-sock-"+a.name
		file := filepath.Join(cdir, "secret")
		if err := os.WriteFile(file, []byte(fileSecret), 0o600); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(cdir, "caller.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := os.Chmod(sock, 0o700); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(sockSecret))
				c.Close()
			}
		}()
		holder := exec.Command("sleep", "120")
		holder.Env = []string{"CANARY=" + envSecret}
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { holder.Process.Kill(); holder.Wait() }()
		pid := strconv.Itoa(holder.Process.Pid)
		sockProbe := `import socket,sys
s=socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1]); print(s.recv(100).decode())`
		payload := fmt.Sprintf(`cat %s; cat /proc/%s/environ; cat /proc/*/environ; python3 -c '%s' %s`, file, pid, sockProbe, sock)
		leaked := func(out string) []string {
			var l []string
			for _, s := range []string{fileSecret, envSecret, sockSecret} {
				if strings.Contains(out, s) {
					l = append(l, s)
				}
			}
			return l
		}
		// Level 5: the account boundary and the inner sandbox, which also
		// keeps the job out of the account's own store and signing key.
		c := a.cmd(context.Background(), "", "run", "--situation", "credentials", "--allow-spawn", "--", "sh", "-c",
			payload+"; cat "+a.rec.StorePath()+" "+a.rec.KeyPath())
		c.Env = append(c.Env, "CANARY="+envSecret)
		out, _ := c.CombinedOutput()
		if l := leaked(string(out)); len(l) > 0 {
			t.Errorf("a level-5 job read %v:\n%s", l, out)
		}
		if strings.Contains(string(out), "PRIVATE KEY") || strings.Contains(string(out), `"credentials"`) {
			t.Errorf("a level-5 job read the account's store or key:\n%s", out)
		}
		// The account boundary alone: the payload run directly as the
		// account's user, no sandbox.
		direct := exec.Command("setpriv", "--reuid", strconv.Itoa(a.rec.UID), "--regid", strconv.Itoa(a.rec.GID), "--clear-groups",
			"/bin/sh", "-c", payload)
		direct.Env = []string{"PATH=/usr/bin:/bin"}
		direct.Dir = "/"
		out, _ = direct.CombinedOutput()
		if l := leaked(string(out)); len(l) > 0 {
			t.Errorf("the account's user read %v without a sandbox:\n%s", l, out)
		}
		if !strings.Contains(string(out), "ermission denied") {
			t.Errorf("the direct run was not refused access:\n%s", out)
		}
	})

	t.Run("wrong-peer", func(t *testing.T) {
		// nobody is not on the executor's allowlist.
		c := a.cmd(context.Background(), "", "run", "--situation", "credentials", "--", "true")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := c.CombinedOutput()
		if !strings.Contains(string(out), "peer uid 65534 gid 65534 is not allowed") {
			t.Errorf("nobody's run: %s", out)
		}
	})

	t.Run("secrets-refused", func(t *testing.T) {
		c := a.cmd(context.Background(), "", "run", "--situation", "credentials", "--secret", "S", "--", "true")
		c.Env = append(c.Env, "S=value-of-s")
		out, _ := c.CombinedOutput()
		if !strings.Contains(string(out), "grants.secrets pass a value through the caller") {
			t.Errorf("secrets at level 5: %s", out)
		}
	})

	t.Run("oidc", func(t *testing.T) {
		if out, errOut, code := a.run(t, "", "account", "set", a.name, "api-oidc", "--oidc", "https://api.example", "--scope", "repo:read"); code != 0 {
			t.Fatalf("set --oidc: %d %s %s", code, out, errOut)
		}
		start := time.Now()
		out, errOut, code := a.run(t, "", "run", "--situation", "credentials", "--wall", "20s", "--allow-spawn", "--credential", "ID_TOKEN=api-oidc", "--",
			"sh", "-c", `echo "$ID_TOKEN"; echo "$ID_TOKEN" | cut -d. -f2`)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 2 || lines[0] != account.Redacted {
			t.Fatalf("code %d stdout %q stderr %q", code, out, errOut)
		}
		payload, err := base64.RawURLEncoding.DecodeString(lines[1])
		if err != nil {
			t.Fatal(err)
		}
		var claims struct {
			Iss, Sub, Aud, Scope string
			Exp                  int64
		}
		if err := json.Unmarshal(payload, &claims); err != nil {
			t.Fatal(err)
		}
		exp := time.Unix(claims.Exp, 0)
		if claims.Iss != "http://"+account.UserName(a.name) || claims.Aud != "https://api.example" || claims.Scope != "repo:read" ||
			!strings.HasPrefix(claims.Sub, "uid-0:sha256:") || exp.Before(start.Add(20*time.Second)) || exp.After(time.Now().Add(20*time.Second+account.Skew+time.Second)) {
			t.Errorf("claims %+v (exp %v)", claims, exp)
		}
		// Discovery and the JWKS, from the executor, as a verifier reads them.
		client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.rec.Socket())
		}}}
		ctx := oidc.ClientContext(context.Background(), client)
		p, err := oidc.NewProvider(ctx, claims.Iss)
		if err != nil {
			t.Fatalf("discovery: %v", err)
		}
		// A token the verifier cannot have is refused; the keys were fetched.
		if _, err := p.Verifier(&oidc.Config{ClientID: claims.Aud}).Verify(ctx, "e30.e30.e30"); err == nil {
			t.Error("a forged token verified")
		}
	})

	t.Run("store-and-ref-refusals", func(t *testing.T) {
		_, errOut, code := a.run(t, "", "run", "--situation", "credentials", "--credential", "X=no-such-ref", "--", "true")
		if code == 0 || !strings.Contains(errOut, `no credential "no-such-ref" in this account's store`) {
			t.Errorf("unknown ref: %d %s", code, errOut)
		}
		store := a.rec.StorePath()
		if err := os.Chmod(store, 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code = a.run(t, "", "run", "--situation", "credentials", "--credential", "GITHUB_TOKEN=github-readonly", "--", "true")
		os.Chmod(store, 0o600)
		if code == 0 || !strings.Contains(errOut, "refused (chmod 600") {
			t.Errorf("store of mode 0644: %d %s", code, errOut)
		}
	})

	t.Run("user-and-unit", func(t *testing.T) {
		// The user add made: no login shell, its home the account's
		// directory, mode 0700 and its own.
		passwd, err := os.ReadFile("/etc/passwd")
		if err != nil {
			t.Fatal(err)
		}
		var entry []string
		for _, line := range strings.Split(string(passwd), "\n") {
			if f := strings.Split(line, ":"); len(f) == 7 && f[0] == a.rec.User {
				entry = f
			}
		}
		if entry == nil || entry[2] != strconv.Itoa(a.rec.UID) || entry[5] != a.rec.Home() || entry[6] != "/usr/sbin/nologin" {
			t.Errorf("passwd entry of %s: %q", a.rec.User, entry)
		}
		for _, p := range []struct {
			path string
			mode os.FileMode
		}{{a.rec.Home(), 0o700}, {a.rec.StorePath(), 0o600}, {a.rec.TLSDir(), 0o700}, {filepath.Join(a.rec.TLSDir(), "server-key.pem"), 0o600}} {
			st, err := os.Stat(p.path)
			if err != nil || st.Mode().Perm() != p.mode || int(st.Sys().(*syscall.Stat_t).Uid) != a.rec.UID {
				t.Errorf("%s: %v, want mode %v owned by uid %d", p.path, err, p.mode, a.rec.UID)
			}
		}
		// The unit add writes where systemd runs, for this account.
		toolsDir, _ := filepath.Abs(tools.Dir())
		checkUnit(t, a.rec, a.dir, a.bin, toolsDir)
	})

	t.Run("remote-mtls", func(t *testing.T) { remoteMTLS(t, a, addr) })

	// Last: it kills the executor.
	t.Run("kill-9-mid-job", func(t *testing.T) {
		c := a.cmd(context.Background(), "", "run", "--situation", "credentials", "--wall", "90s", "--allow-spawn", "--", "sh", "-c", "echo started; sleep 60")
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		start := time.Now()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		// Wait (bounded) for the job's VM under the account's user.
		data, err := os.ReadFile(filepath.Join(a.rec.RunDir(), "executor.pid"))
		if err != nil {
			t.Fatal(err)
		}
		execPid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		for i := 0; i < 600 && len(processesOf(a.rec.UID)) < 2; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // into the run
		if err := syscall.Kill(execPid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			c.Process.Kill()
			t.Fatal("the caller hung after the executor was killed")
		}
		if took := time.Since(start); took > 90*time.Second {
			t.Errorf("the caller took %v, past its wall clock", took)
		}
		if c.ProcessState.ExitCode() == 0 || !strings.Contains(out.String(), "went away") {
			t.Errorf("caller: exit %d: %s", c.ProcessState.ExitCode(), out.String())
		}
		noProcessesOf(t, a.rec.UID)
	})
}

// BenchmarkAccountOverhead runs /bin/true through the account tier and,
// side by side, on the executor's own inner tier (the microVM, the one
// that runs as the account's non-root user) in this process; the account
// run reports its time as a multiple of the inner one (x-inner).
func BenchmarkAccountOverhead(b *testing.B) {
	a := newLocalAccount(b)
	acct := account.New(account.NewConfig(a.name, a.rec.Socket(), a.rec.UID))
	var inner airlock.Tier
	for _, e := range tierset.Entries() {
		if e.Name == "microvm" {
			t, err := e.New(tierset.Options{})
			if err != nil {
				b.Fatal(err)
			}
			inner = t
		}
	}
	defer tierset.Close([]airlock.Tier{inner})
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Situation: airlock.SituationCredentials}
	var innerPerOp time.Duration
	for _, t := range []airlock.Tier{inner, acct} {
		b.Run(t.Name(), func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if _, err := t.Run(context.Background(), job); err != nil {
					b.Fatal(err)
				}
			}
			perOp := time.Since(start) / time.Duration(b.N)
			if t == inner {
				innerPerOp = perOp
			} else if innerPerOp > 0 {
				b.ReportMetric(float64(perOp)/float64(innerPerOp), "x-inner")
			}
		})
	}
}

// TestAccountCommandErrors: the account command's refusals are one line
// each, and need no root to be seen.
func TestAccountCommandErrors(t *testing.T) {
	t.Setenv("AIRLOCK_ACCOUNTS", t.TempDir())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"account"}, "account takes a subcommand: add, set, start, stop, renew, list, rm or serve"},
		{[]string{"account", "frob"}, `unknown subcommand "frob": want add, set, start, stop, renew, list, rm or serve`},
		{[]string{"account", "add"}, "account add takes one NAME"},
		{[]string{"account", "set", "x"}, "account set takes NAME and REF (the value on stdin)"},
		{[]string{"account", "list", "x"}, "account list takes no arguments"},
		{[]string{"account", "add", "Bad_Name"}, "want a lower-case letter"},
		{[]string{"account", "start", "nosuch"}, "no account nosuch (add it: airlock account add nosuch)"},
		{[]string{"account", "serve", "nosuch"}, "no account nosuch"},
		{[]string{"account", "renew", "nosuch"}, "no account nosuch"},
		{[]string{"account", "set", "x", "ref", "--caller", "bob"}, `"bob": want uid-N or cert-CN`},
		{[]string{"account", "add", "x", "--url", "https://h:1", "--ca", "c"}, "--cert: is required with --url"},
		{[]string{"account", "add", "x", "--ca", "c"}, "give its --url too"},
		{[]string{"account", "add", "x", "--url", "h:1", "--ca", "c", "--cert", "c", "--key", "k"}, `remote URL "h:1": want https://HOST:PORT`},
		{[]string{"account", "add", "x", "--url", "https://h:1", "--ca", "/nonexistent/ca.pem", "--cert", "c", "--key", "k"}, "/nonexistent/ca.pem"},
		{[]string{"account", "add", "x", "--listen", "127.0.0.1:0"}, "want HOST:PORT with a fixed port"},
	} {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), c.args, strings.NewReader(""), &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), c.want) || strings.Count(strings.TrimSpace(errOut.String()), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q, want one line with %q", c.args, code, errOut.String(), c.want)
		}
	}
}

// freeLoopback returns a loopback address with a port free a moment ago.
func freeLoopback(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// remoteMTLS reaches the account's executor as a remote account: over
// HTTPS on loopback with the CA and client certificate `account add
// --listen` made, and refused with certificates this test makes itself.
func remoteMTLS(t *testing.T, a *localAccount, addr string) {
	cdir := t.TempDir()
	bundle := a.rec.ClientDir()
	for _, f := range []string{"ca.pem", "client.pem", "client-key.pem", "ca-key.pem"} {
		st, err := os.Stat(filepath.Join(bundle, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(f, "key") && st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", f, st.Mode().Perm())
		}
	}
	// Another CA, and a client certificate it signed, made here.
	rogueCA, rogueKey := testCA(t, "rogue CA")
	rogueCAFile := filepath.Join(cdir, "rogue-ca.pem")
	os.WriteFile(rogueCAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rogueCA.Raw}), 0o644)
	rogueCert, rogueCertKey := filepath.Join(cdir, "rogue.pem"), filepath.Join(cdir, "rogue-key.pem")
	testLeaf(t, rogueCA, rogueKey, "caller", rogueCert, rogueCertKey)

	// The caller's own configuration: its accounts directory.
	callerEnv := func(name string) []string {
		var env []string
		for _, kv := range a.env {
			if !strings.HasPrefix(kv, "AIRLOCK_ACCOUNTS=") && !strings.HasPrefix(kv, "AIRLOCK_ACCOUNT=") {
				env = append(env, kv)
			}
		}
		return append(env, "AIRLOCK_ACCOUNTS="+cdir, "AIRLOCK_ACCOUNT="+name)
	}
	caller := func(name, stdin string, args ...string) (string, string, int) {
		c := *a
		c.env = callerEnv(name)
		return c.run(t, stdin, args...)
	}
	add := func(name, url, ca, cert, key string) {
		t.Helper()
		if out, errOut, code := caller(name, "", "account", "add", name, "--url", url, "--ca", ca, "--cert", cert, "--key", key); code != 0 {
			t.Fatalf("account add %s --url: %d %s %s", name, code, out, errOut)
		}
	}
	url := "https://" + addr
	add("rem", url, filepath.Join(bundle, "ca.pem"), filepath.Join(bundle, "client.pem"), filepath.Join(bundle, "client-key.pem"))
	add("wrongcert", url, filepath.Join(bundle, "ca.pem"), rogueCert, rogueCertKey)
	add("unpinned", url, rogueCAFile, filepath.Join(bundle, "client.pem"), filepath.Join(bundle, "client-key.pem"))
	add("othername", "https://localhost:"+strings.Split(addr, ":")[1], filepath.Join(bundle, "ca.pem"), filepath.Join(bundle, "client.pem"), filepath.Join(bundle, "client-key.pem"))

	if out, _, code := caller("rem", "", "account", "list"); code != 0 || !strings.Contains(out, "rem ") || !strings.Contains(out, url) {
		t.Errorf("account list: %d\n%s", code, out)
	}
	out, errOut, code := caller("rem", "", "run", "--situation", "credentials", "--credential", "GITHUB_TOKEN=github-readonly", "--",
		"sh", "-c", `test -n "$GITHUB_TOKEN" && echo ok`)
	if code != 0 || out != "ok\n" {
		t.Fatalf("through mutual TLS: code %d stdout %q stderr %q", code, out, errOut)
	}

	// A credential for the remote caller alone, named by its client
	// certificate: the remote caller gets it, the local one is refused.
	if out, errOut, code := a.run(t, a.value+"-remote\n", "account", "set", a.name, "gh-remote", "--caller", "cert-caller"); code != 0 {
		t.Fatalf("account set --caller: %d %s %s", code, out, errOut)
	}
	out, errOut, code = caller("rem", "", "run", "--situation", "credentials", "--credential", "T=gh-remote", "--", "sh", "-c", `test -n "$T" && echo ok`)
	if code != 0 || out != "ok\n" {
		t.Errorf("the remote caller's own credential: code %d stdout %q stderr %q", code, out, errOut)
	}
	if _, errOut, code := a.run(t, "", "run", "--situation", "credentials", "--credential", "T=gh-remote", "--", "true"); code == 0 ||
		!strings.Contains(errOut, `credential "gh-remote" may not be used by uid-0 (only by cert-caller)`) {
		t.Errorf("the local caller with the remote one's credential: %d %s", code, errOut)
	}

	auditPath := filepath.Join(a.rec.Home(), "audit.jsonl")
	before, _ := os.ReadFile(auditPath)
	for name, want := range map[string]string{
		"wrongcert": "refused this caller's client certificate",
		"unpinned":  "presented a certificate the pinned CA (" + rogueCAFile + ") did not sign: refused",
		"othername": "presented a certificate for another name",
	} {
		out, errOut, code := caller(name, "", "run", "--situation", "credentials", "--credential", "GITHUB_TOKEN=github-readonly", "--", "true")
		if code == 0 || !strings.Contains(errOut, want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("%s: code %d stdout %q stderr %q, want one line with %q", name, code, out, errOut, want)
		}
	}
	if after, _ := os.ReadFile(auditPath); len(after) != len(before) {
		t.Errorf("a refused caller reached the executor's server:\n%s", after[len(before):])
	}

	// A client key others may read is refused when named.
	loose := filepath.Join(cdir, "loose-key.pem")
	data, _ := os.ReadFile(filepath.Join(bundle, "client-key.pem"))
	os.WriteFile(loose, data, 0o644)
	if _, errOut, code := caller("loose", "", "account", "add", "loose", "--url", url, "--ca", filepath.Join(bundle, "ca.pem"),
		"--cert", filepath.Join(bundle, "client.pem"), "--key", loose); code == 0 || !strings.Contains(errOut, "refused (chmod 600") {
		t.Errorf("a loose client key: %d %s", code, errOut)
	}
	// A remote account is not started, stopped or given credentials here.
	if _, errOut, code := caller("rem", "", "account", "start", "rem"); code == 0 || !strings.Contains(errOut, "account rem is remote") {
		t.Errorf("start of a remote account: %d %s", code, errOut)
	}
	if out, errOut, code := caller("rem", "", "account", "rm", "rem"); code != 0 || !strings.Contains(out, "removed (remote") {
		t.Errorf("rm of a remote account: %d %s %s", code, out, errOut)
	}
}

// testCA makes a CA certificate and key.
func testCA(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// testLeaf writes a client certificate signed by ca, and its key (0600).
func testLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// parseUnit reads a unit file strictly: sections, then KEY=VALUE lines,
// no key twice in a section.
func parseUnit(t testing.TB, text string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	var sec map[string]string
	for i, line := range strings.Split(text, "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			sec = map[string]string{}
			out[line[1:len(line)-1]] = sec
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || sec == nil {
				t.Fatalf("line %d: %q is not KEY=VALUE in a section", i+1, line)
			}
			if _, dup := sec[k]; dup {
				t.Fatalf("line %d: %s twice", i+1, k)
			}
			sec[k] = v
		}
	}
	return out
}

// checkUnit holds the unit of account r to what matters (its user, no
// capabilities, the hardening options, the paths it may write) and, where
// systemd-analyze is installed, to `systemd-analyze verify` (no warning
// at all) and to an offline exposure score below 5.
func checkUnit(t *testing.T, r account.Record, dir, exe, toolsDir string) {
	t.Helper()
	text, err := unitText(r, dir, exe, toolsDir)
	if err != nil {
		t.Fatal(err)
	}
	u := parseUnit(t, text)
	svc := u["Service"]
	want := map[string]string{
		"User": r.User, "Group": r.User, "WorkingDirectory": r.Home(),
		"ExecStart":       exe + " account serve " + r.Name,
		"NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
		"ProtectSystem": "strict", "ReadWritePaths": r.Home() + " " + r.RunDir(), "ProtectHome": "yes", "PrivateTmp": "yes", "ProtectProc": "invisible",
		"UMask": "0077", "RestrictSUIDSGID": "yes", "ProtectKernelModules": "yes", "ProtectKernelTunables": "yes", "ProtectControlGroups": "yes",
		"Restart": "on-failure",
	}
	for k, v := range want {
		if got, ok := svc[k]; !ok || got != v {
			t.Errorf("[Service] %s = %q (set: %v), want %q", k, got, ok, v)
		}
	}
	env := strings.Fields(svc["Environment"])
	for _, kv := range []string{"AIRLOCK_ACCOUNTS=" + dir, "HOME=" + r.Home(), "TMPDIR=" + r.Home() + "/tmp", "AIRLOCK_TOOLS=" + toolsDir} {
		if !slices.Contains(env, kv) {
			t.Errorf("Environment %q lacks %s", svc["Environment"], kv)
		}
	}
	for _, k := range []string{"DeviceAllow", "DevicePolicy", "PrivateDevices", "ProtectClock", "MemoryDenyWriteExecute", "SupplementaryGroups", "PrivateUsers"} {
		if _, ok := svc[k]; ok {
			t.Errorf("[Service] sets %s (the microVM needs /dev/kvm and W+X memory; the user its own groups only)", k)
		}
	}
	if u["Install"]["WantedBy"] != "multi-user.target" {
		t.Errorf("[Install] %v", u["Install"])
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Skipf(t, "systemd-analyze not found (Debian's systemd): the unit is checked field by field only")
	}
	udir := t.TempDir()
	file := filepath.Join(udir, "airlock-account-"+r.Name+".service")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", file).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s\n%s", err, out, text)
	}
	out, err = exec.Command(sa, "security", "--offline=true", "--no-pager", file).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security: exposure %.1f", score)
	if score >= 5 {
		t.Errorf("exposure %.1f, want below 5:\n%s", score, out)
	}
}

// TestAccountUnit checks the unit `airlock account add` writes where
// systemd runs, for an account record as add makes it (no root: the unit
// is rendered, not installed).
func TestAccountUnit(t *testing.T) {
	dir := t.TempDir()
	r := account.Record{Name: "gh", User: account.UserName("gh"), UID: 990, GID: 990}
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	r, err := account.Load(dir, "gh")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	checkUnit(t, r, dir, exe, dir)
	// What would be misread in a unit is refused with one line.
	if _, err := unitText(r, dir+"/with space", exe, dir); err == nil || !strings.Contains(err.Error(), "cannot be named in a systemd unit") {
		t.Errorf("a path with a space: %v", err)
	}
	if _, err := unitText(r, dir, exe, "/opt/50%"); err == nil {
		t.Error("a path with a specifier was accepted")
	}
	// A binary under /root keeps /root readable (not writable).
	if text, err := unitText(r, dir, "/root/go/bin/airlock", dir); err != nil || parseUnit(t, text)["Service"]["ProtectHome"] != "read-only" {
		t.Errorf("binary under /root: %v\n%s", err, text)
	}
}
