# netshim -- deadlines and circuit breakers for programs nobody can change.

PREFIX ?= /usr/local
DESTDIR ?=
# the library goes to $(LIBDIR)/netshim/ (the Debian package: the multiarch
# directory); shimrun looks there too, after beside itself and ../lib/netshim
LIBDIR ?= $(PREFIX)/lib
# systemd reads units from $(PREFIX)/lib/systemd/system for /usr and /usr/local
SYSTEMD_DIR ?= $(PREFIX)/lib/systemd/system
CC ?= cc
SANITIZER ?=
BUILD ?= build$(if $(SANITIZER),-$(SANITIZER))
WERROR ?=
PYTHON ?= /usr/bin/python3
# the version: debian/changelog's first line, the one place it is written
VERSION := $(shell sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' debian/changelog)

WARN := -Wall -Wextra -Wshadow -Wmissing-prototypes -Wstrict-prototypes \
	-Werror=format-security -Wimplicit-fallthrough
BASE_CFLAGS := -std=gnu11 -O2 -g -D_GNU_SOURCE -fPIC $(WARN) $(if $(WERROR),-Werror)
SAN_FLAGS :=
ifeq ($(SANITIZER),address)
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else ifeq ($(SANITIZER),undefined)
SAN_FLAGS := -fsanitize=undefined -fno-sanitize-recover=undefined
else ifeq ($(SANITIZER),thread)
SAN_FLAGS := -fsanitize=thread
else ifneq ($(SANITIZER),)
$(error SANITIZER must be address, undefined or thread, not '$(SANITIZER)')
endif
# The shim is never built with a sanitizer for use: its runtime would have to
# be preloaded into every host program. The one exception is the TSan build,
# whose only host is the TSan-built stress client (make tsan).
SHIM_SAN := $(if $(filter thread,$(SANITIZER)),$(SAN_FLAGS))
# user CFLAGS add to ours rather than replace them
FINAL_CFLAGS := $(BASE_CFLAGS) $(SAN_FLAGS) $(CFLAGS)
FINAL_LDFLAGS := $(SAN_FLAGS) $(LDFLAGS)
# shimrun is linked static (a static PIE) where the toolchain can: it runs
# before every program it governs, and its dynamic loading was ~200 us of
# each run (make bench, section 11); a sanitizer build, or a toolchain with
# no static libc, links it as the rest
SHIMRUN_STATIC := $(if $(SANITIZER),,$(shell printf 'int main(void){return 0;}\n' | \
	$(CC) -static-pie -x c -o /dev/null - 2>/dev/null && echo -static-pie))

POLICY_SRC := policy/policy.c policy/scalars.c policy/values.c policy/patterns.c policy/faultspec.c policy/breaker.c policy/table.c policy/addrs.c policy/shaping.c policy/tablefile.c policy/faulttable.c policy/namemap.c policy/scenario.c policy/ocring.c policy/hpack.c policy/h2.c policy/h1.c policy/h1end.c policy/words.c policy/account.c policy/admit.c policy/events.c policy/reqq.c policy/polimage.c policy/polfile.c policy/fleetshare.c
SHIM_SRC := $(sort $(wildcard shim/*.c))
POLICY_OBJ := $(POLICY_SRC:%.c=$(BUILD)/%.o)
SHIM_OBJ := $(SHIM_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC := $(wildcard tests/unit/test_*.c)

LIB := $(BUILD)/libnetshim.so
TOOLS := $(BUILD)/shimctl $(BUILD)/shimrun $(BUILD)/faultsrv $(BUILD)/bench $(BUILD)/tablebench \
	$(BUILD)/netshim-agent $(BUILD)/fleetbench $(BUILD)/fleetscale $(BUILD)/h2bench $(BUILD)/gohookbench
CLIENTS := $(BUILD)/fclient $(BUILD)/tracee $(BUILD)/vforkclose $(BUILD)/mmsg $(BUILD)/hammer \
	$(BUILD)/fclient-static $(BUILD)/sigconnect $(BUILD)/siglocks $(BUILD)/sigstorm $(BUILD)/escapes $(BUILD)/escapes-static $(BUILD)/sslhost $(BUILD)/deepbind $(BUILD)/libdeeplib.so $(BUILD)/libdeeplib-now.so $(BUILD)/libdeeplib-addr.so $(BUILD)/x86walk

.PHONY: compile_commands.json all test unit integration negative install uninstall bench bench-fleet bench-fleet-scale demo deps clean tsan fuzz compat deb

all: $(LIB) $(TOOLS) $(CLIENTS)

$(BUILD)/%.o: %.c $(wildcard policy/*.h shim/*.h tools/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -c -o $@ $<

# The address and undefined runs cover the decision code the shim shares
# with shimctl and the unit tests; see SHIM_SAN above for thread.
$(BUILD)/shim/%.o: shim/%.c $(wildcard policy/*.h shim/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(SHIM_SAN) $(CFLAGS) -fvisibility=hidden -c -o $@ $<

$(BUILD)/shimpolicy/%.o: policy/%.c $(wildcard policy/*.h) shim/nointercept.h
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(SHIM_SAN) $(CFLAGS) -fvisibility=hidden -include shim/nointercept.h -c -o $@ $<

# the version script: the list of exports (shim/exports.h), one per line
$(BUILD)/netshim.map: shim/netshim.map.in shim/exports.h
	@mkdir -p $(dir $@)
	$(CC) -E -P -x c -Ishim shim/netshim.map.in | tr ' ' '\n' | grep -v '^$$' > $@.tmp
	mv $@.tmp $@

# -z now and relro: the library's own GOT is read-only once loaded, as the
# hardened programs it lives in expect. -Bsymbolic-functions: the library's
# own uses of its exported wrappers' addresses bind inside it at link time,
# not by 55 symbol lookups of the loader in every process it is preloaded in.
$(LIB): $(SHIM_OBJ) $(POLICY_SRC:policy/%.c=$(BUILD)/shimpolicy/%.o) $(BUILD)/netshim.map
	$(CC) -shared -o $@ $(SHIM_OBJ) $(POLICY_SRC:policy/%.c=$(BUILD)/shimpolicy/%.o) $(SHIM_SAN) \
		-Wl,--version-script=$(BUILD)/netshim.map -Wl,-z,now -Wl,-z,relro -Wl,-Bsymbolic-functions -ldl -lpthread \
		$(LDFLAGS)

# tools/common: what shimctl and the agent share (the table kit, the
# Prometheus text); each program's folder holds that program alone
KIT_SRC := tools/common/tablekit.c tools/common/promtext.c
KIT_OBJ := $(KIT_SRC:%.c=$(BUILD)/%.o)
# shimctl's commands apart from its command line (shimctl.c), so that the
# fuzz harness links them as they are
CTL_SRC := $(filter-out tools/shimctl/shimctl.c,$(sort $(wildcard tools/shimctl/*.c)))
CTL_OBJ := $(CTL_SRC:%.c=$(BUILD)/%.o)

$(BUILD)/tools/shimctl/shimctl.o: tools/shimctl/shimctl.c $(wildcard policy/*.h tools/*/*.h) debian/changelog
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -DNETSHIM_VERSION='"$(VERSION)"' -c -o $@ $<

$(BUILD)/shimctl: $(BUILD)/tools/shimctl/shimctl.o $(CTL_OBJ) $(KIT_OBJ) $(POLICY_OBJ)
	$(CC) -o $@ $^ $(FINAL_LDFLAGS) -lsqlite3

# the fleet agent: the only program that talks to Redis (hiredis)
# the fleet agent: the only program that talks to Redis (hiredis); its
# link to Redis (model, redislink, hmac) is shared with the fleet benchmarks
FLEET_OBJ := $(BUILD)/tools/agent/model.o $(BUILD)/tools/agent/redislink.o $(BUILD)/tools/agent/hmac.o
AGENT_OBJ := $(filter-out $(FLEET_OBJ),$(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard tools/agent/*.c))))

$(BUILD)/netshim-agent: $(AGENT_OBJ) $(FLEET_OBJ) $(KIT_OBJ) $(POLICY_OBJ)
	$(CC) -o $@ $^ $(FINAL_LDFLAGS) -lhiredis -lsqlite3

$(BUILD)/fleetscale: $(BUILD)/tools/bench/fleetscale.o $(BUILD)/tools/bench/benchkit.o $(FLEET_OBJ) $(KIT_OBJ) $(POLICY_OBJ)
	$(CC) -o $@ $^ $(FINAL_LDFLAGS) -lhiredis

$(BUILD)/fleetbench: $(BUILD)/tools/bench/fleetbench.o $(BUILD)/tools/bench/benchkit.o $(FLEET_OBJ) $(KIT_OBJ) $(POLICY_OBJ)
	$(CC) -o $@ $^ $(FINAL_LDFLAGS) -lhiredis -lpthread

$(BUILD)/tools/shimrun/shimrun.o: tools/shimrun/shimrun.c $(wildcard policy/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(FINAL_CFLAGS) -DNS_LIBDIR='"$(LIBDIR)"' -c -o $@ $<

$(BUILD)/shimrun: $(BUILD)/tools/shimrun/shimrun.o $(BUILD)/tools/shimrun/supervise.o $(BUILD)/tools/shimrun/govern.o \
		$(BUILD)/tools/shimrun/govacct.o $(BUILD)/tools/shimrun/govwait.o $(BUILD)/tools/shimrun/sockwatch.o \
		$(BUILD)/tools/shimrun/goexec.o $(BUILD)/tools/shimrun/gohook.o $(BUILD)/tools/shimrun/goelf.o \
		$(BUILD)/tools/shimrun/gostat.o $(BUILD)/tools/shimrun/x86len.o $(POLICY_OBJ)
	$(CC) $(SHIMRUN_STATIC) -o $@ $^ $(FINAL_LDFLAGS)

$(BUILD)/faultsrv: $(BUILD)/tools/testsrv/faultsrv.o
	$(CC) -o $@ $^ $(FINAL_LDFLAGS)

$(BUILD)/tablebench: $(BUILD)/tools/bench/tablebench.o $(POLICY_OBJ)
	$(CC) -o $@ $^ $(FINAL_LDFLAGS)

$(BUILD)/h2bench: $(BUILD)/tools/bench/h2bench.o $(POLICY_OBJ)
	$(CC) -o $@ $^ $(FINAL_LDFLAGS)

$(BUILD)/bench: $(BUILD)/tools/bench/bench.o
	$(CC) -o $@ $^ $(FINAL_LDFLAGS) -lpthread

# The test client is built the way distributions build C programs, so it
# imports the fortified __recv_chk and __read_chk.
$(BUILD)/fclient: tests/clients/fclient.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -D_FORTIFY_SOURCE=2 -Wall -o $@ $<

# small C programs for one behaviour each, built the way distributions build
$(BUILD)/vforkclose $(BUILD)/mmsg $(BUILD)/hammer $(BUILD)/sigconnect $(BUILD)/siglocks $(BUILD)/sigstorm $(BUILD)/sslhost: $(BUILD)/%: tests/clients/%.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -D_FORTIFY_SOURCE=2 -Wall -o $@ $< $(if $(filter %sslhost,$@),-ldl)

# the ways to a connection that are not connect(), dynamic (the preload
# engine) and static (the seccomp engine)
$(BUILD)/escapes: tests/clients/escapes.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -D_FORTIFY_SOURCE=2 -Wall -o $@ $< -lpthread

$(BUILD)/escapes-static: tests/clients/escapes.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -D_FORTIFY_SOURCE=2 -Wall -static -o $@ $< -lpthread

# a statically linked client: what LD_PRELOAD cannot reach (shimrun warns;
# the compatibility matrix lists it as escaping)
$(BUILD)/fclient-static: tests/clients/fclient.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -D_FORTIFY_SOURCE=2 -Wall -static -o $@ $< -lpthread

# the RTLD_DEEPBIND test: a loader, and one library built lazy, one built
# -z now (its GOT read-only after relocation), one holding addresses
$(BUILD)/deepbind: tests/clients/deepbind.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -D_FORTIFY_SOURCE=2 -Wall -o $@ $< -ldl

DEEPLIB_SRC := tests/clients/deeplib.c tests/clients/deeplib_refs.c
$(BUILD)/libdeeplib.so: $(DEEPLIB_SRC)
	@mkdir -p $(dir $@)
	$(CC) -O2 -Wall -fPIC -shared -Wl,-z,lazy -Wl,-z,norelro -o $@ $(DEEPLIB_SRC)

$(BUILD)/libdeeplib-now.so: $(DEEPLIB_SRC)
	@mkdir -p $(dir $@)
	$(CC) -O2 -Wall -fPIC -shared -Wl,-z,now -Wl,-z,relro -o $@ $(DEEPLIB_SRC)

$(BUILD)/libdeeplib-addr.so: $(DEEPLIB_SRC)
	@mkdir -p $(dir $@)
	$(CC) -O2 -Wall -fPIC -shared -DDEEP_ADDRS -Wl,-z,now -Wl,-z,relro -o $@ $(DEEPLIB_SRC)

# compiled with -g and unoptimised, so its function names are there to trace
$(BUILD)/tracee: tests/clients/tracee.c
	@mkdir -p $(dir $@)
	$(CC) -g -O0 -Wall -o $@ $<

# shim/settings.c stands alone (no libc wrapper in it): tested here directly
UNIT_TOOLS := shim/settings.c tools/agent/hmac.c tools/shimrun/gohook.c tools/shimrun/gostat.c tools/shimrun/x86len.c
$(BUILD)/unit_tests: $(UNIT_SRC) $(POLICY_OBJ) $(UNIT_TOOLS) $(wildcard tools/shimrun/*.h)
	$(CC) $(FINAL_CFLAGS) -o $@ $(UNIT_SRC) $(UNIT_TOOLS) $(POLICY_OBJ) -lcriterion $(FINAL_LDFLAGS)

# the Go hook's cost per answer (make bench, section 11)
$(BUILD)/gohookbench: tools/bench/gohookbench.c tools/shimrun/gohook.c tools/shimrun/gohook.h tools/shimrun/goelf.h
	$(CC) $(FINAL_CFLAGS) -o $@ tools/bench/gohookbench.c tools/shimrun/gohook.c $(FINAL_LDFLAGS)

# the instruction walker against objdump (test_gostatus.py)
$(BUILD)/x86walk: tests/clients/x86walk.c tools/shimrun/x86len.c tools/shimrun/x86len.h
	$(CC) $(FINAL_CFLAGS) -o $@ tests/clients/x86walk.c tools/shimrun/x86len.c $(FINAL_LDFLAGS)

$(BUILD)/stress: tests/clients/stress.c
	@mkdir -p $(dir $@)
	$(CC) -O1 -g -Wall $(SAN_FLAGS) -o $@ $< -lpthread

# TSan (make SANITIZER=thread tsan): builds the unit tests with it, then runs
# the stress client on the TSan-built shim and table code; any report fails.
# Criterion's test runner cannot start under TSan (its inheritable arena
# collides with TSan's memory layout: Snaipe/Criterion#274), so the unit
# tests are built, not run, here; the stress client drives the same table
# code from ten threads.
tsan: $(LIB) $(BUILD)/unit_tests $(BUILD)/stress
	@test "$(SANITIZER)" = thread || { echo "make tsan needs SANITIZER=thread" >&2; exit 2; }
	tests/tsan/stress.sh $(BUILD)

# libFuzzer harnesses (clang): the policy parser and resolver, the
# destination parser, shimctl reading a hostile table file, the HTTP/1
# status reader, scenarios, the HPACK decoder against libnghttp2's, and the
# HTTP/2 frame reader (split reads against whole ones).
FUZZ_DIR := build-fuzz
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=gnu11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_TIME ?= 60

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(POLICY_SRC) $(wildcard policy/*.h) $(CTL_SRC) $(KIT_SRC) $(wildcard tools/*/*.h) \
		shim/exchange.c $(wildcard shim/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(POLICY_SRC) $(if $(filter %table,$@),$(CTL_SRC) $(KIT_SRC) -lsqlite3) \
		$(if $(filter %hpack,$@),-lnghttp2)

$(FUZZ_DIR)/seed_table: tests/fuzz/seed_table.c $(POLICY_SRC) $(wildcard policy/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=gnu11 -g -O1 -D_GNU_SOURCE -o $@ $< $(POLICY_SRC)

fuzz: $(FUZZ_DIR)/fuzz_policy $(FUZZ_DIR)/fuzz_dest $(FUZZ_DIR)/fuzz_table $(FUZZ_DIR)/fuzz_http $(FUZZ_DIR)/fuzz_scenario \
		$(FUZZ_DIR)/fuzz_hpack $(FUZZ_DIR)/fuzz_h2 $(FUZZ_DIR)/fuzz_h1end $(FUZZ_DIR)/seed_table
	FUZZ_TIME=$(FUZZ_TIME) tests/fuzz/run.sh $(FUZZ_DIR)

unit: $(BUILD)/unit_tests
	$(BUILD)/unit_tests --jobs 2 --short-filename

# three test files at once where pytest-xdist is installed (a file's tests
# stay together, in order, on one worker; each Redis Cluster fixture is its
# worker's own): 14 minutes on this 2-core machine, 31 one at a time.
# WORKERS=1 runs them one at a time.
WORKERS ?= 3
XDIST = $(shell $(PYTHON) -c 'import xdist' 2>/dev/null && echo yes)
integration: all
	NETSHIM_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q \
		$(if $(and $(XDIST),$(filter-out 1,$(WORKERS))),-n $(WORKERS) --dist loadfile) tests/integration

# the compatibility matrix: every installed client of tests/compat's list
# through the healthy, connect, read and open cases (COMPAT=1
# tools/install-deps.sh installs them)
compat: all
	NETSHIM_BUILD=$(abspath $(BUILD)) $(PYTHON) tests/compat/compat.py --markdown $(BUILD)/compat.md

# every test: unit, integration, and the negative control that shows each
# shim test failing with the shim switched off
test: unit integration negative

negative: all
	PYTHON=$(PYTHON) tests/negative_control.sh $(BUILD)

# installs the nginx and HAProxy it compares against where it can (as root)
# the report goes to $(BUILD)/bench.txt, and (as the last run) to
# docs/bench-last.txt, whose figures docs/benchmarks.md shows (figures.py;
# a test checks the two agree)
bench: all
	-BENCH_PEERS=1 tools/install-deps.sh --all
	tools/bench/bench.sh $(BUILD)
	cp $(BUILD)/bench.txt docs/bench-last.txt
	$(PYTHON) tools/bench/figures.py docs/bench-last.txt docs/benchmarks.md README.md

# the fleet's propagation delay and cost at 10, 100 and 1,000 nodes
bench-fleet: all
	tools/bench/bench-fleet.sh $(BUILD)
	tools/bench/bench-fleet-scale.sh $(BUILD)

# the cluster part alone (NODES=, POLL_MS=, SHARDS=, TRIALS=, BURST=)
bench-fleet-scale: all
	tools/bench/bench-fleet-scale.sh $(BUILD)

# only what the demo runs: a first command that needs a compiler, curl and
# python3-requests (tools/install-deps.sh without --all)
demo: $(LIB) $(BUILD)/shimrun $(BUILD)/shimctl $(BUILD)/faultsrv
	tools/demo.sh $(BUILD)

deps:
	tools/install-deps.sh --all

install: $(LIB) $(BUILD)/shimctl $(BUILD)/shimrun $(BUILD)/netshim-agent
	install -d $(DESTDIR)$(LIBDIR)/netshim $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/man/man7 $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(SYSTEMD_DIR) \
		$(DESTDIR)$(PREFIX)/share/netshim-agent
	install -m 0644 $(LIB) $(DESTDIR)$(LIBDIR)/netshim/libnetshim.so
	install -m 0755 $(BUILD)/shimctl $(BUILD)/shimrun $(BUILD)/netshim-agent $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 man/shimctl.1 man/shimrun.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 man/netshim.7 $(DESTDIR)$(PREFIX)/share/man/man7/
	install -m 0644 man/netshim-agent.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 0644 tools/agent/prometheus/netshim-rules.yml tools/agent/prometheus/netshim-rules.test.yml \
		tools/agent/grafana/netshim.json $(DESTDIR)$(PREFIX)/share/netshim-agent/
	sed 's|@PREFIX@|$(PREFIX)|g' tools/agent/netshim-agent.service > $(DESTDIR)$(SYSTEMD_DIR)/netshim-agent.service
	chmod 0644 $(DESTDIR)$(SYSTEMD_DIR)/netshim-agent.service

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/netshim/libnetshim.so $(DESTDIR)$(PREFIX)/bin/shimctl \
		$(DESTDIR)$(PREFIX)/bin/shimrun $(DESTDIR)$(PREFIX)/share/man/man1/shimctl.1 \
		$(DESTDIR)$(PREFIX)/share/man/man1/shimrun.1 $(DESTDIR)$(PREFIX)/share/man/man7/netshim.7 \
		$(DESTDIR)$(PREFIX)/bin/netshim-agent $(DESTDIR)$(PREFIX)/share/man/man8/netshim-agent.8 \
		$(DESTDIR)$(SYSTEMD_DIR)/netshim-agent.service $(DESTDIR)$(PREFIX)/share/netshim-agent/netshim-rules.yml \
		$(DESTDIR)$(PREFIX)/share/netshim-agent/netshim-rules.test.yml $(DESTDIR)$(PREFIX)/share/netshim-agent/netshim.json
	-rmdir $(DESTDIR)$(LIBDIR)/netshim $(DESTDIR)$(PREFIX)/share/netshim-agent

# the Debian packages (debian/, debhelper 13) into build/deb/
deb:
	dpkg-buildpackage -us -uc -b -tc -rfakeroot
	rm -rf build/deb && mkdir -p build/deb
	mv ../netshim_*.deb ../netshim-agent_*.deb ../netshim_*.buildinfo ../netshim_*.changes build/deb/
	-mv ../netshim-dbgsym_*.deb ../netshim-agent-dbgsym_*.deb build/deb/ 2>/dev/null

# For editors and clang tools: every C file with the flags it is built with
# (the shim's with its visibility, policy/ as the programs build it).
compile_commands.json:
	$(PYTHON) -c 'import json, os, sys; d = os.getcwd(); \
		shim, base = sys.argv[1], sys.argv[2]; \
		files = sys.argv[3:]; \
		print(json.dumps([{"directory": d, "file": f, \
			"command": "$(CC) " + (shim if f.startswith("shim/") else base) + " -c " + f} for f in files], indent=1))' \
		"$(BASE_CFLAGS) -fvisibility=hidden" "$(BASE_CFLAGS)" \
		$(SHIM_SRC) $(POLICY_SRC) $(wildcard tools/*/*.c tests/unit/*.c tests/clients/*.c tests/fuzz/*.c) > $@

clean:
	rm -rf build build-address build-undefined build-thread build-fuzz build-clang
