# airlock: the two commands that matter on a fresh machine are
#   go run ./cmd/airlock eval '1 + 2'   (no set-up, no root)
#   make test                           (installs what the heavier tiers need, then runs every test)

GO ?= go
# Packages that also run under the race detector. The process tier's guarded
# workers are then the race-built test binary: under the address-space limit
# its race runtime may fail to map shadow memory, which the tier reports as
# the memory stop it is. TestCgroupV2 is left out of the race run: it boots
# an emulated guest around the test binary, which race-built outlasts the
# 30-minute timeout; the plain run above runs it.
RACE_PKGS = . ./escalate/... ./interp/... ./internal/cache/... ./internal/monotime/... ./egress/... ./tiers/process/...

# The portable core: what builds (and vets, tests included) for macOS and
# Windows. The tiers, the server and the CLI are Linux only.
PORTABLE_PKGS = . ./escalate ./interp/expr ./interp/starlark ./wasm ./egress ./egress/sanitize

.PHONY: all build setup install test test-go test-race vet portable bench corpus clean

all: build

# bin/airlock is the lean build (-tags lean): it leaves out the server,
# MCP, sanitize, bench, corpus, replay and audit commands, whose packages
# would slow every start, and runs them in bin/airlock-full beside it, the
# build with every command (`go build ./cmd/airlock` gives that one).
# bin/airlock-stage beside them: the process tier's small stage binary,
# which it finds next to its executable (see docs/process.md).
# -buildvcs=auto: --version names the commit where git can tell it, even
# when the environment's GOFLAGS turns stamping off.
build:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -tags lean -o bin/airlock ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o bin/airlock-full ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -o bin/airlock-stage ./tiers/process/cmd/airlock-stage

# Install airlock where it runs from any directory: the binaries into
# $(PREFIX)/bin, and what the heavier tiers use (runsc, QEMU, the guest
# kernel and agent) into $(PREFIX)/lib/airlock, which the binary finds
# relative to itself. Run `make setup` first for those.
PREFIX ?= /usr/local
LIBDIR = $(DESTDIR)$(PREFIX)/lib/airlock
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(LIBDIR)/bin
	install -m 0755 bin/airlock bin/airlock-full bin/airlock-stage $(DESTDIR)$(PREFIX)/bin/
	# A tool that set-up linked from a system package (QEMU, which loads
	# its modules relative to its own path) stays a link; the rest are copied.
	for t in runsc qemu-system-x86_64 firecracker; do \
		if [ -L .tools/bin/$$t ]; then ln -sfn "$$(readlink -f .tools/bin/$$t)" $(LIBDIR)/bin/$$t; \
		elif [ -e .tools/bin/$$t ]; then install -m 0755 .tools/bin/$$t $(LIBDIR)/bin/$$t; fi; \
	done
	if [ -d .tools/microvm ]; then \
		rm -rf $(LIBDIR)/microvm && cp -R .tools/microvm $(LIBDIR)/microvm; \
	fi
	@echo "installed airlock into $(DESTDIR)$(PREFIX)/bin, its tiers' tools into $(LIBDIR)"

# Install runsc, QEMU and a guest kernel, wabt, bubblewrap, curl, python3... into
# .tools/ or through apt-get. Idempotent. Needs root.
setup:
	bash scripts/setup.sh

vet:
	$(GO) vet ./...

portable:
	GOOS=darwin $(GO) build $(PORTABLE_PKGS)
	GOOS=darwin $(GO) vet $(PORTABLE_PKGS)
	GOOS=windows $(GO) build $(PORTABLE_PKGS)
	GOOS=windows $(GO) vet $(PORTABLE_PKGS)

# Every tier is mandatory here: a missing backend fails instead of skipping.
test: setup vet portable build
	CI=true $(GO) test -count=1 -timeout 45m ./...
	CI=true $(GO) test -count=1 -race -timeout 30m -skip '^TestCgroupV2$$' $(RACE_PKGS)
	./bin/airlock corpus

test-go:
	$(GO) test ./...

bench: build
	./bin/airlock bench --out bench/results

corpus: build
	./bin/airlock corpus

clean:
	rm -rf bin
