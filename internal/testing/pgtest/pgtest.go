// Package pgtest starts a throw-away PostgreSQL cluster for a test: initdb
// in a temporary directory, a server listening only on a Unix socket in
// it, stopped and removed when the test ends. As root the cluster runs as
// the unprivileged user nobody (PostgreSQL refuses to run as root).
// Without PostgreSQL's binaries (scripts/setup-postgres.sh installs them)
// the test is skipped, or failed under CI.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-sandbox/airlock/internal/deathsig"
	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// binDir finds the newest installed PostgreSQL's bin directory.
func binDir() string {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(found, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return va - vb
	})
	if len(found) > 0 {
		return filepath.Dir(found[len(found)-1])
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// Start starts a cluster and returns a key=value DSN for its database
// "airlock" over the Unix socket.
func Start(t testing.TB) string {
	t.Helper()
	bin := binDir()
	if bin == "" {
		testenv.Skipf(t, "PostgreSQL is not installed (scripts/setup-postgres.sh)")
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			testenv.Skipf(t, "running as root, and there is no user nobody to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	// Not t.TempDir: its parents are private to the test's user, and the
	// cluster's user must reach its directory. The socket path is short.
	dir, err := os.MkdirTemp("", "airlock-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	command := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.Dir = dir
		c.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + dir}
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
		return c
	}
	if out, err := command("initdb", "-D", data, "-U", "airlock", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	var log syncbuf.Buffer
	pg := command("postgres", "-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "fsync=off",
		"-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	pg.Stdout, pg.Stderr = &log, &log
	// Should the test binary die without its cleanups (a panic), the
	// cluster shuts down at once (SIGQUIT) rather than linger.
	pg.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	wait, err := deathsig.Start(pg)
	if err != nil {
		t.Fatalf("starting postgres: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- wait() }()
	t.Cleanup(func() {
		// A failed test shows what the cluster went through (a shutdown
		// it was sent, say).
		if t.Failed() {
			t.Logf("postgres log:\n%s", log.String())
		}
		// SIGINT is PostgreSQL's fast shutdown: it ends the sessions and
		// every backend, then the postmaster.
		_ = pg.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-pg.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	dsn := fmt.Sprintf("host=%s user=airlock dbname=postgres sslmode=disable", dir)
	// Wait for it to accept connections, then make the test's database.
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = conn.Exec(ctx, "CREATE DATABASE airlock")
			_ = conn.Close(ctx)
			cancel()
			if err != nil {
				t.Fatalf("creating the database: %v", err)
			}
			break
		}
		cancel()
		select {
		case err := <-exited:
			t.Fatalf("postgres exited: %v\n%s", err, log.String())
		default:
		}
		if i == 300 {
			t.Fatalf("postgres did not accept connections: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Sprintf("host=%s user=airlock dbname=airlock sslmode=disable", dir)
}

// Conn connects to dsn for the test's own look at the database, closed
// when the test ends.
func Conn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
