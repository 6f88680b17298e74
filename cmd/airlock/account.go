package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/tiers/account"
)

func init() {
	register(&command{
		name:    "account",
		summary: "manage level-5 accounts: executors under other OS users that hold credentials (see docs/account.md)",
		usage: `account add NAME [--allow-uid N]... [--allow-gid N]... [--listen HOST:PORT [--tls-name N]...]   create the OS user, its directories, credential store and unit; --listen: also serve over mutual TLS
       airlock account add NAME --url https://HOST:PORT --ca CA.pem --cert CLIENT.pem --key CLIENT-KEY.pem   name an account whose executor runs on another machine
       airlock account list                                    list the accounts and whether each executor runs
       airlock account set NAME REF < VALUE                    store a credential (value on stdin, never in arguments)
       airlock account set NAME REF --oidc AUDIENCE [--scope S]...  an OIDC token minted per job
       airlock account set NAME REF --caller uid-N|cert-CN ...      (with either) only these callers may use it
       airlock account start NAME | stop NAME                  start or stop the account's executor
       airlock account renew NAME                              new keys and certificates for the executor and its caller, from the account's CA (restart the executor; copy the caller's bundle again)
       airlock account rm NAME                                 stop it, remove the user, its directories and unit
       airlock account serve NAME                              the executor itself (run as the account's user)`,
		run: accountCmd,
	})
}

func accountCmd(ctx context.Context, e *env) int {
	c := commands["account"]
	fs := e.flags(c)
	var allowUIDs, allowGIDs stringList
	fs.Var(&allowUIDs, "allow-uid", "with add: a caller `UID` the executor serves (repeatable; default: the invoking user's, SUDO_UID when set)")
	fs.Var(&allowGIDs, "allow-gid", "with add: a caller `GID` the executor serves (repeatable)")
	issuer := fs.String("issuer", "", "with add: the `URL` in the iss of the account's OIDC tokens (default http://airlock-NAME, served on the executor's socket)")
	oidcAud := fs.String("oidc", "", "with set: the credential is an OIDC token minted per job for this `AUDIENCE`")
	var scopes stringList
	fs.Var(&scopes, "scope", "with set --oidc: a `SCOPE` the token carries (repeatable)")
	var callers stringList
	fs.Var(&callers, "caller", "with set: only this `CALLER` may use the credential, uid-N (a local caller) or cert-CN (a remote one's client certificate; repeatable; default: every caller the executor serves)")
	listen := fs.String("listen", "", "with add: the executor also serves over HTTPS with mutual TLS on `HOST:PORT`; add makes the account's CA, the executor's certificate and a caller's client certificate")
	var tlsNames stringList
	fs.Var(&tlsNames, "tls-name", "with add --listen: a DNS `NAME` or IP address the executor's certificate holds (repeatable; default: the --listen host, else this machine's name)")
	var remote account.Remote
	fs.StringVar(&remote.URL, "url", "", "with add: the account's executor runs on another machine, at this https `URL`")
	fs.StringVar(&remote.CA, "ca", "", "with add --url: the PEM `FILE` of the account's CA, the only one its executor's certificate may chain to")
	fs.StringVar(&remote.Cert, "cert", "", "with add --url: the PEM `FILE` of this caller's client certificate")
	fs.StringVar(&remote.Key, "key", "", "with add --url: the PEM `FILE` of its key (mode 0600 or stricter)")
	pos, _, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return e.fail(jobs.Invalid("", "account takes a subcommand: add, set, start, stop, renew, list, rm or serve (see `airlock help account`)"))
	}
	sub, args := pos[0], pos[1:]
	need := func(n int) bool { return len(args) == n }
	dir := account.Dir()
	var err error
	switch {
	case sub == "list" && need(0):
		err = accountList(e, dir)
	case sub == "add" && need(1) && remote.URL != "":
		if *listen != "" || *issuer != "" || len(allowUIDs)+len(allowGIDs)+len(tlsNames) > 0 {
			return e.fail(jobs.Invalid("--url", "names a remote account: --listen, --tls-name, --issuer and --allow-* are set where its executor runs"))
		}
		err = accountAddRemote(e, dir, args[0], remote)
	case sub == "add" && need(1):
		if remote.CA != "" || remote.Cert != "" || remote.Key != "" {
			return e.fail(jobs.Invalid("--url", "--ca, --cert and --key name a remote account's files: give its --url too"))
		}
		err = accountAdd(e, dir, args[0], *issuer, *listen, tlsNames, allowUIDs, allowGIDs)
	case sub == "set" && need(2):
		err = accountSet(e, dir, args[0], args[1], *oidcAud, scopes, callers)
	case sub == "start" && need(1):
		err = accountStart(ctx, e, dir, args[0])
	case sub == "stop" && need(1):
		err = accountStop(e, dir, args[0])
	case sub == "renew" && need(1):
		err = accountRenew(e, dir, args[0])
	case sub == "rm" && need(1):
		err = accountRemove(e, dir, args[0])
	case sub == "serve" && need(1):
		err = accountServe(ctx, e, dir, args[0])
	default:
		if want, known := accountArgs[sub]; known {
			return e.fail(jobs.Invalid("", "account %s takes %s (see `airlock help account`)", sub, want))
		}
		return e.fail(jobs.Invalid("", "unknown subcommand %q: want add, set, start, stop, renew, list, rm or serve (see `airlock help account`)", sub))
	}
	if err != nil {
		return e.fail(err)
	}
	return exitOK
}

// accountRenew gives the executor and its caller new keys and
// certificates from the account's CA (the CA, which callers pin, stays).
func accountRenew(e *env, dir, name string) error {
	r, err := loadLocal(dir, name, "renew")
	if err != nil {
		return err
	}
	if err := needRoot("renew"); err != nil {
		return err
	}
	if _, err := r.RenewTLS(time.Now(), true); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "airlock: account %s: new certificates in %s and %s; restart its executor (airlock account stop %s; airlock account start %s) and copy the caller's bundle again\n", name, r.TLSDir(), r.ClientDir(), name, name)
	return nil
}

// loadLocal loads an account whose executor runs here.
func loadLocal(dir, name, what string) (account.Record, error) {
	r, err := account.Load(dir, name)
	if err == nil && r.IsRemote() {
		err = jobs.Invalid("", "account %s is remote: %s it where its executor runs (%s)", name, what, r.Remote.URL)
	}
	if _, statErr := os.Stat(filepath.Join(dir, name+".json")); err != nil && errors.Is(statErr, os.ErrNotExist) {
		// A name no account has is bad input (exit 2), not a failure.
		err = jobs.Invalid("", "%s", err.Error())
	}
	return r, err
}

func needRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("airlock account %s needs root (it manages OS users)", what)
	}
	return nil
}

func parseIDs(flag string, list []string) ([]uint32, error) {
	var out []uint32
	for _, s := range list {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, jobs.Invalid(flag, "%q is not a numeric id", s)
		}
		out = append(out, uint32(n))
	}
	return out, nil
}

// systemd reports whether systemd manages this machine.
func systemd() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}

func unitName(name string) string { return "airlock-account-" + name + ".service" }

func unitPath(name string) string { return filepath.Join("/etc/systemd/system", unitName(name)) }

// accountAddRemote records how this caller reaches an account whose
// executor runs elsewhere. It makes no user and needs no root beyond
// writing the accounts directory.
func accountAddRemote(e *env, dir, name string, rm account.Remote) error {
	if err := account.CheckName(name); err != nil {
		return jobs.Invalid("NAME", "%s", err.Error())
	}
	for _, f := range []struct{ flag, path string }{{"--ca", rm.CA}, {"--cert", rm.Cert}, {"--key", rm.Key}} {
		if f.path == "" {
			return jobs.Invalid(f.flag, "is required with --url")
		}
	}
	var err error
	for _, p := range []*string{&rm.CA, &rm.Cert, &rm.Key} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	if old, err := account.Load(dir, name); err == nil && !old.IsRemote() {
		return fmt.Errorf("account %s is a local account here (remove it first: airlock account rm %s)", name, name)
	}
	// What the tier would refuse, refused now: the URL or a file given
	// (static checks, no connection), so the command line is at fault.
	if err := account.New(account.NewRemoteConfig(name, rm)).Available(); err != nil {
		return jobs.Invalid("", "%v", err)
	}
	if err := ensureAccountsDir(dir); err != nil {
		return err
	}
	r := account.Record{Name: name, UID: -1, GID: -1, Remote: &rm}
	if err := r.Save(dir); err != nil {
		return fmt.Errorf("account %s: %w", name, err)
	}
	fmt.Fprintf(e.stdout, "account %s: remote, executor at %s (mutual TLS, CA %s pinned, client certificate %s)\n", name, rm.URL, rm.CA, rm.Cert)
	return nil
}

// ensureAccountsDir makes the accounts directory, or takes the one there,
// only if it and every directory above it are root's (or this user's) and
// closed to others: root makes the account's directories in it and
// writes into them, so whoever could make entries there first would
// decide where those writes land.
func ensureAccountsDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err == nil {
		_, err = statedir.Ensure(abs, 0o755)
	}
	if err != nil && !statedir.IsRefused(err) {
		err = fmt.Errorf("accounts directory: %w", err)
	}
	return statedir.As(err, "accounts directory")
}

// tlsNames are the names the executor's certificate holds: those given,
// else the --listen host, else this machine's name.
func tlsNames(listen string, given []string) []string {
	if len(given) > 0 {
		return given
	}
	host, _, _ := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return []string{host}
	}
	h, err := os.Hostname()
	if err != nil {
		return []string{"localhost"}
	}
	return []string{h}
}

// accountArgs says what each account subcommand takes, for the line that
// answers a wrong count.
var accountArgs = map[string]string{
	"add": "one NAME", "set": "NAME and REF (the value on stdin)", "start": "one NAME", "stop": "one NAME",
	"renew": "one NAME", "rm": "one NAME", "serve": "one NAME", "list": "no arguments",
}

func accountAdd(e *env, dir, name, issuer, listen string, names, allowUIDs, allowGIDs []string) error {
	if err := account.CheckName(name); err != nil {
		return jobs.Invalid("NAME", "%s", err.Error())
	}
	if listen != "" {
		if _, port, err := net.SplitHostPort(listen); err != nil || port == "" || port == "0" {
			return jobs.Invalid("--listen", "%q: want HOST:PORT with a fixed port", listen)
		}
	} else if len(names) > 0 {
		return jobs.Invalid("--tls-name", "is for the certificate of --listen: give --listen too")
	}
	if err := needRoot("add"); err != nil {
		return err
	}
	if old, err := account.Load(dir, name); err == nil && old.IsRemote() {
		return fmt.Errorf("account %s is a remote account here (remove it first: airlock account rm %s)", name, name)
	}
	uids, err := parseIDs("--allow-uid", allowUIDs)
	if err != nil {
		return err
	}
	gids, err := parseIDs("--allow-gid", allowGIDs)
	if err != nil {
		return err
	}
	if len(uids) == 0 && len(gids) == 0 {
		caller := os.Getuid()
		if s := os.Getenv("SUDO_UID"); s != "" {
			if n, err := strconv.Atoi(s); err == nil {
				caller = n
			}
		}
		uids = []uint32{uint32(caller)}
	}
	if err := ensureAccountsDir(dir); err != nil {
		return err
	}
	uname := account.UserName(name)
	u, err := user.Lookup(uname)
	if err != nil {
		home := filepath.Join(dir, name)
		out, err := exec.Command("useradd", "--system", "--user-group", "--shell", "/usr/sbin/nologin",
			"--home-dir", home, "--no-create-home", "--comment", "airlock account "+name, uname).CombinedOutput()
		if err != nil {
			return fmt.Errorf("useradd %s: %v: %s", uname, err, strings.TrimSpace(string(out)))
		}
		if u, err = user.Lookup(uname); err != nil {
			return fmt.Errorf("user %s after useradd: %w", uname, err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	r := account.Record{Name: name, User: uname, UID: uid, GID: gid, Allow: account.Allow{UIDs: uids, GIDs: gids}, Issuer: issuer, Listen: listen}
	if err := r.Save(dir); err != nil {
		return fmt.Errorf("account %s: %w", name, err)
	}
	if err := r.Prepare(); err != nil {
		return fmt.Errorf("account %s: %w", name, err)
	}
	remote := ""
	if listen != "" {
		if err := r.MakeTLS(tlsNames(listen, names)); err != nil {
			return fmt.Errorf("account %s: certificates: %w", name, err)
		}
		remote = fmt.Sprintf(", mutual TLS on %s (a caller's CA and client certificate: %s)", listen, r.ClientDir())
	}
	unit := "no systemd here: start it with airlock account start " + name
	if systemd() {
		if err := writeUnit(r, dir); err != nil {
			return err
		}
		unit = "unit " + unitPath(name)
	}
	fmt.Fprintf(e.stdout, "account %s: user %s (uid %d), credential store %s, socket %s, serves %s%s; %s\n", name, uname, uid, r.StorePath(), r.Socket(), r.Allow, remote, unit)
	return nil
}

func writeUnit(r account.Record, dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	toolsDir := ""
	if d := tools.Dir(); d != "" {
		if toolsDir, err = filepath.Abs(d); err != nil {
			return err
		}
	}
	unit, err := unitText(r, dir, exe, toolsDir)
	if err != nil {
		return err
	}
	return os.WriteFile(unitPath(r.Name), []byte(unit), 0o644)
}

// unitPathRE is what a path in the unit may hold: nothing systemd would
// read as a separator, a quote, a specifier (%) or a variable ($).
var unitPathRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^/[A-Za-z0-9/._+-]*$`) })

// unitText is the account's systemd unit: the executor under the
// account's user with no capabilities, a read-only system but for the
// account's own directories, and no view of /home, /root or /run/user
// (the callers' files), unless the binary or its tools live there, and
// no view of other users' processes.
// Devices stay visible (no device policy, so no ProtectClock): the
// microVM may use /dev/kvm. QEMU generates code under emulation, so
// writable-executable memory stays allowed.
func unitText(r account.Record, dir, exe, toolsDir string) (string, error) {
	paths := []string{dir, exe, r.Home(), r.RunDir()}
	if toolsDir != "" {
		paths = append(paths, toolsDir)
	}
	for _, p := range paths {
		if !unitPathRE().MatchString(p) {
			return "", fmt.Errorf("%q cannot be named in a systemd unit: want an absolute path of letters, digits and / . _ + -", p)
		}
	}
	protectHome := "yes"
	for _, p := range []string{exe, toolsDir} {
		for _, h := range []string{"/home/", "/root/", "/run/user/"} {
			if strings.HasPrefix(p, h) {
				protectHome = "read-only"
			}
		}
	}
	env := fmt.Sprintf("AIRLOCK_ACCOUNTS=%s HOME=%s TMPDIR=%s/tmp", dir, r.Home(), r.Home())
	if toolsDir != "" {
		env += " AIRLOCK_TOOLS=" + toolsDir
	}
	return fmt.Sprintf(`[Unit]
Description=airlock executor of account %[1]s (level 5)
After=network.target

[Service]
Type=simple
User=%[2]s
Group=%[2]s
WorkingDirectory=%[3]s
Environment=%[4]s
ExecStart=%[5]s account serve %[1]s
Restart=on-failure
UMask=0077
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ReadWritePaths=%[3]s %[6]s
ProtectHome=%[7]s
PrivateTmp=yes
PrivateIPC=yes
RemoveIPC=yes
ProtectProc=invisible
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native

[Install]
WantedBy=multi-user.target
`, r.Name, r.User, r.Home(), env, exe, r.RunDir(), protectHome), nil
}

func accountList(e *env, dir string) error {
	all, err := account.List(dir)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tUSER\tUID\tEXECUTOR\tSERVES\tREACHED AT")
	for _, r := range all {
		if r.IsRemote() {
			fmt.Fprintf(tw, "%s\t-\t-\tremote\tmutual TLS\t%s\n", r.Name, r.Remote.URL)
			continue
		}
		at := r.Socket()
		if r.Listen != "" {
			at += ", https://" + r.Listen
		}
		state := "stopped"
		if executorUp(r) {
			state = "running"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, r.User, r.UID, state, r.Allow, at)
	}
	return tw.Flush()
}

var callerRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(uid-[0-9]+|cert-[^\s]+)$`) })

func accountSet(e *env, dir, name, ref, audience string, scopes, callers []string) error {
	for _, c := range callers {
		if !callerRE().MatchString(c) {
			return jobs.Invalid("--caller", "%q: want uid-N or cert-CN", c)
		}
	}
	r, err := loadLocal(dir, name, "set credentials for")
	if err != nil {
		return err
	}
	if err := needRoot("set"); err != nil {
		return err
	}
	j := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Grants: airlock.Grants{Credentials: []airlock.Credential{{Env: "X", Ref: ref}}}}
	if err := j.Validate(); err != nil {
		return jobs.Invalid("REF", "%q: want 1-64 letters, digits, '.', '_' or '-'", ref)
	}
	if audience != "" {
		if err := account.AddOIDC(r.StorePath(), ref, audience, scopes, r.UID, r.GID); err != nil {
			return err
		}
		if err := setCallers(r, ref, callers); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "account %s: OIDC credential %s for %s stored (issuer %s)%s\n", name, ref, audience, r.IssuerURL(), forCallers(callers))
		return nil
	}
	value, err := io.ReadAll(io.LimitReader(e.stdin, maxCredentialValue+1))
	if err != nil {
		return err
	}
	if len(value) > maxCredentialValue {
		// Cut, it would be another credential, and wrong wherever used.
		return jobs.Invalid("stdin", "the value is longer than %d bytes: not stored", maxCredentialValue)
	}
	v := strings.TrimRight(string(value), "\r\n")
	if err := account.AddStatic(r.StorePath(), ref, v, r.UID, r.GID); err != nil {
		return err
	}
	if err := setCallers(r, ref, callers); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "account %s: credential %s stored%s\n", name, ref, forCallers(callers))
	return nil
}

// maxCredentialValue is the longest value `account set` stores.
const maxCredentialValue = 1 << 20

func setCallers(r account.Record, ref string, callers []string) error {
	if len(callers) == 0 {
		return nil
	}
	return account.SetCallers(r.StorePath(), ref, callers, r.UID, r.GID)
}

func forCallers(callers []string) string {
	if len(callers) == 0 {
		return ""
	}
	return ", for " + strings.Join(callers, ", ") + " only"
}

// executorUp reports whether the account's executor answers on its socket.
func executorUp(r account.Record) bool {
	c, err := net.DialTimeout("unix", r.Socket(), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func accountStart(ctx context.Context, e *env, dir, name string) error {
	r, err := loadLocal(dir, name, "start")
	if err != nil {
		return err
	}
	if err := needRoot("start"); err != nil {
		return err
	}
	if executorUp(r) {
		fmt.Fprintf(e.stdout, "account %s: executor already running on %s\n", name, r.Socket())
		return nil
	}
	if systemd() {
		if out, err := exec.Command("systemctl", "start", unitName(name)).CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl start %s: %v: %s", unitName(name), err, strings.TrimSpace(string(out)))
		}
	} else if err := startDirect(r, dir); err != nil {
		return err
	}
	// Bounded: the executor builds its inner tier before it listens.
	for i := 0; i < 600; i++ {
		if executorUp(r) {
			fmt.Fprintf(e.stdout, "account %s: executor running as %s on %s\n", name, r.User, r.Socket())
			return nil
		}
		if pid, err := readPid(r); err == nil && syscall.Kill(pid, 0) != nil {
			break // it exited
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	tail, _ := r.ReadLog()
	lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
	return fmt.Errorf("account %s: the executor did not start: %s", name, lines[len(lines)-1])
}

// startDirect starts the executor under the account's user with setpriv,
// where no systemd runs: a new session, a clean environment, no
// supplementary groups, no capabilities, no new privileges.
func startDirect(r account.Record, dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return errors.New("setpriv not found (util-linux): cannot start the executor under the account's user")
	}
	// The log is in the account's directory, its user's: opened there
	// without following what that user may have put in its place.
	logf, err := r.OpenLog()
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(setpriv, "--reuid", strconv.Itoa(r.UID), "--regid", strconv.Itoa(r.GID), "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", exe, "account", "serve", r.Name)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + r.Home(), "TMPDIR=" + filepath.Join(r.Home(), "tmp"), "AIRLOCK_ACCOUNTS=" + dir}
	if d := tools.Dir(); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			cmd.Env = append(cmd.Env, "AIRLOCK_TOOLS="+abs)
		}
	}
	cmd.Dir = r.Home()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the executor: %w", err)
	}
	pid := cmd.Process.Pid
	go cmd.Wait() // reap it should it exit while this process lives
	return r.WritePid(pid)
}

func readPid(r account.Record) (int, error) {
	data, err := r.ReadPid()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(data))
}

func accountStop(e *env, dir, name string) error {
	r, err := loadLocal(dir, name, "stop")
	if err != nil {
		return err
	}
	if err := needRoot("stop"); err != nil {
		return err
	}
	stopExecutor(r)
	fmt.Fprintf(e.stdout, "account %s: executor stopped\n", name)
	return nil
}

// stopExecutor stops the executor and waits (bounded) until it is gone.
func stopExecutor(r account.Record) {
	if systemd() {
		_ = exec.Command("systemctl", "stop", unitName(r.Name)).Run()
	}
	pid, err := readPid(r)
	if err != nil {
		return
	}
	// Only a process of the account's user is signalled: a stale pid
	// file must not stop another process.
	if st, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) == r.UID {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			for i := 0; i < 150 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	r.RemovePid()
}

func accountRemove(e *env, dir, name string) error {
	if err := account.CheckName(name); err != nil {
		return jobs.Invalid("NAME", "%s", err.Error())
	}
	if r, err := account.Load(dir, name); err == nil && r.IsRemote() {
		// A caller's record only: nothing runs here.
		if err := os.Remove(filepath.Join(dir, name+".json")); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "account %s: removed (remote, at %s)\n", name, r.Remote.URL)
		return nil
	}
	if err := needRoot("rm"); err != nil {
		return err
	}
	r, err := account.Load(dir, name)
	if err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, name+".json")); errors.Is(statErr, os.ErrNotExist) {
			fmt.Fprintf(e.stdout, "account %s: not present\n", name)
			return nil
		}
		return err
	}
	stopExecutor(r)
	if systemd() {
		_ = exec.Command("systemctl", "disable", unitName(name)).Run()
		os.Remove(unitPath(name))
	}
	// Whatever the account's user still runs goes first, or userdel refuses.
	_ = exec.Command("pkill", "-KILL", "-U", strconv.Itoa(r.UID)).Run()
	if _, err := user.Lookup(r.User); err == nil {
		if out, err := exec.Command("userdel", r.User).CombinedOutput(); err != nil {
			return fmt.Errorf("userdel %s: %v: %s", r.User, err, strings.TrimSpace(string(out)))
		}
	}
	for _, p := range []string{r.Home(), r.RunDir(), r.ClientDir()} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, name+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fmt.Fprintf(e.stdout, "account %s: removed (user %s, its directories and credential store)\n", name, r.User)
	return nil
}
