# nuksm: NUMA-aware memory deduplication for QEMU/KVM.
#
#   make            install dependencies, build QEMU + nuksmd + nuksmctl
#   make check      ... and run every test suite (sanitizers and a short
#                   fuzzing run included)
#   make fuzz       fuzz the protocol decoder and the agent's message
#                   handling, 10 minutes per target (FUZZ_SECONDS=)
#   make demo       ... and boot two small VMs attached to a live agent
#   make bench      ... and benchmark nuksm against kernel KSM (root,
#                   about three and a half hours; docs/benchmarks.rst)
#   make bench-quick  the same, smaller and fewer workloads (about 8 minutes)
#   make bench-placement  where merged copies live under each policy,
#                   counted in sampled reads, and what read sampling
#                   costs a reading KVM guest (about 17 minutes; also
#                   part of make bench)
#   make bench-scheme  co-location (AdaptMD-S) and the adaptive scheme on
#                   AdaptMD's mirrored deployment, against global, local
#                   and adaptive (about 15 minutes; also part of make bench)
#   make bench-fleet  what placing a fleet's VMs by their content sketches
#                   saves against random placement (a simulation, under
#                   a minute; also part of make bench)
#   make bench-many-vms  8 to 128 small VMs, each side at its defaults:
#                   time to merge, steady CPU against no deduplication
#                   (about an hour; also part of make bench)
#   make bench-pressure  merging only while memory is short, against KSM
#                   under a ksmtuned-style controller (about 20 minutes;
#                   also part of make bench)
#   make bench-huge-pages  a TLB-bound KVM guest's speed and its huge pages
#                   beside the memory saved, none, KSM and nuksm, and how
#                   soon huge pages come back once merging ends (about
#                   25 minutes; also part of make bench)
#   make soak       ... and churn eight VMs for SOAK_SECONDS (default 1800)
#                   while the agent is killed again and again
#   make install    install nuksmd, nuksmctl, the patched QEMU (as
#                   nuksm-qemu-system-x86_64), the systemd units and
#                   nuksmd.conf under PREFIX (/usr/local), into DESTDIR
#
# Entry points after a build: build/bin/{qemu-system-x86_64,nuksmd,nuksmctl}
#
# SPDX-License-Identifier: GPL-2.0-or-later

BUILD ?= $(CURDIR)/build
export BUILD QEMU_SRC QEMU_VERSION

VENV  := $(BUILD)/venv
MESON := $(VENV)/bin/meson
BIN   := $(BUILD)/bin
QTEST := $(BUILD)/qemu/tests/qtest/nuksm-test

# The scripts and tools find the binaries here.
export NUKSM_QEMU := $(BIN)/qemu-system-x86_64
export NUKSMD     := $(BIN)/nuksmd
export NUKSMCTL   := $(BIN)/nuksmctl

.PHONY: all deps tools qemu guest install check check-unit check-qtest \
        check-integration check-sanitize check-fuzz fuzz demo clean \
        distclean

all: tools qemu

deps:
	@scripts/install-deps.sh

tools: deps
	@test -f $(BUILD)/meson/build.ninja || \
	    $(MESON) setup -Dwerror=true $(BUILD)/meson
	@echo "==> building libnuksm, nuksmd, nuksmctl"
	@ninja -C $(BUILD)/meson
	@mkdir -p $(BIN)
	@ln -sf $(BUILD)/meson/nuksmd $(BIN)/nuksmd
	@ln -sf $(BUILD)/meson/nuksmctl $(BIN)/nuksmctl

qemu: deps
	@scripts/build-qemu.sh

guest: deps
	@scripts/make-guest.sh

PREFIX ?= /usr/local
install: all
	@PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) scripts/install.sh

check: all guest
	@$(MAKE) --no-print-directory check-unit check-qtest check-integration \
	    check-numa-lab check-sanitize check-fuzz

check-unit:
	@echo "==> unit tests (libnuksm)"
	@$(MESON) test -C $(BUILD)/meson --print-errorlogs

check-qtest:
	@echo "==> qtest (nuksm object, real nuksmd)"
	@QTEST_QEMU_BINARY=$(NUKSM_QEMU) timeout 600 $(QTEST) --tap -k

check-integration:
	@echo "==> integration tests (pytest, qemu.qmp, real guests)"
	@$(VENV)/bin/python -m pytest tests/integration

# ASan + UBSan build of libnuksm, nuksmd, nuksmctl and the unit tests
# (gcc).  Any report fails: UBSan's halt on the first, LeakSanitizer
# checks every exit (nuksmd's after SIGTERM too), and the integration
# tests that need no QEMU fail on any report file their programs leave in
# $(SAN_LOGS) (tests/integration/conftest.py).  Tests of how glibc's
# allocator gives memory back (marker allocator) are left out: ASan
# replaces that allocator.
SAN_BUILD := $(BUILD)/meson-asan
SAN_LOGS  := $(BUILD)/sanitize-logs
SAN_ENV   := ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 \
             UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
             G_SLICE=always-malloc

check-sanitize: deps
	@echo "==> sanitizers (ASan, LeakSanitizer, UBSan): unit tests and the" \
	      "agent-only integration tests"
	@test -f $(SAN_BUILD)/build.ninja || \
	    $(MESON) setup -Dwerror=true -Db_sanitize=address,undefined \
	        -Db_lundef=false $(SAN_BUILD)
	@ninja -C $(SAN_BUILD)
	@$(SAN_ENV) $(MESON) test -C $(SAN_BUILD) --print-errorlogs
	@rm -rf $(SAN_LOGS)
	@$(SAN_ENV) NUKSM_SANITIZER_LOGS=$(SAN_LOGS) \
	    NUKSMD=$(SAN_BUILD)/nuksmd NUKSMCTL=$(SAN_BUILD)/nuksmctl \
	    $(VENV)/bin/python -m pytest -m "not qemu and not allocator" \
	    tests/integration

# libFuzzer targets (tests/fuzz/README.rst), clang with ASan and UBSan:
# a short run in make check, a long one in make fuzz.  Crashing inputs
# land in $(BUILD)/fuzz/artifacts/.
FUZZ_CHECK_SECONDS ?= 30
FUZZ_SECONDS ?= 600

check-fuzz: deps
	@echo "==> fuzzing: $(FUZZ_CHECK_SECONDS) s per target"
	@scripts/fuzz.sh $(FUZZ_CHECK_SECONDS)

fuzz: deps
	@echo "==> fuzzing: $(FUZZ_SECONDS) s per target"
	@scripts/fuzz.sh $(FUZZ_SECONDS)

demo: all guest
	@$(VENV)/bin/python scripts/demo.py

clean:
	rm -rf $(BUILD)/meson $(BUILD)/qemu $(BUILD)/bin $(BUILD)/guest \
	       $(BUILD)/demo $(BUILD)/meson-asan $(BUILD)/meson-fuzz \
	       $(BUILD)/sanitize-logs

distclean:
	rm -rf $(BUILD)

# NUMA lab (docs/testing.rst): a TCG guest with two NUMA nodes runs nuksmd
# and two qtest VMs and checks with move_pages() where merged pages sit.
.PHONY: numa-lab check-numa-lab
numa-lab: all guest
	@$(MAKE) --no-print-directory check-numa-lab

check-numa-lab:
	@echo "==> NUMA lab (two-node guest, physical placement)"
	@scripts/make-numa-lab.sh
	@scripts/numa-lab.sh
clean: clean-numa-lab
.PHONY: clean-numa-lab
clean-numa-lab:
	rm -rf $(BUILD)/numa-lab

# Soak (tests/integration/test_soak.py): eight VMs churning while the
# agent is killed again and again, with balloon discards.  make check
# runs it for a minute.
SOAK_SECONDS ?= 1800
.PHONY: soak
soak: all
	@echo "==> soak: $(SOAK_SECONDS) s of churn, agent kills, stopped VMs"
	@NUKSM_SOAK_SECONDS=$(SOAK_SECONDS) $(VENV)/bin/python -m pytest -s tests/integration/test_soak.py

# Benchmarks against kernel KSM (docs/benchmarks.rst): root, since KSM's
# settings are global (they are restored).  Results in bench/results/.
.PHONY: bench bench-quick bench-placement bench-scheme bench-fleet \
	bench-many-vms bench-pressure bench-huge-pages bench-migration
bench: all guest
	@echo "==> benchmarks: nuksm and kernel KSM side by side (about three and a half hours)"
	@$(VENV)/bin/python bench/run.py
	@$(MAKE) --no-print-directory bench-placement
	@$(MAKE) --no-print-directory bench-scheme
	@$(MAKE) --no-print-directory bench-fleet
	@$(MAKE) --no-print-directory bench-many-vms
	@$(MAKE) --no-print-directory bench-pressure
	@$(MAKE) --no-print-directory bench-huge-pages
	@$(MAKE) --no-print-directory bench-migration
bench-many-vms: all
	@echo "==> many small VMs, each side at its defaults (about an hour)"
	@$(VENV)/bin/python bench/many_vms.py
bench-pressure: all
	@echo "==> merging by memory pressure against a ksmtuned-style controller (about 20 min)"
	@$(VENV)/bin/python bench/pressure.py
bench-huge-pages: all
	@echo "==> a TLB-bound guest's speed and huge pages beside the memory saved, and their rebuild (about 25 min)"
	@$(VENV)/bin/python bench/huge_pages.py
	@$(VENV)/bin/python bench/huge_rebuild.py
bench-migration: all
	@echo "==> a VM migrating to a host that holds half of its content, landing merged (about 35 min)"
	@$(VENV)/bin/python bench/migration.py
bench-scheme: all
	@echo "==> co-location and the adaptive scheme on AdaptMD's mirrored deployment (about 15 min)"
	@$(VENV)/bin/python bench/scheme.py
bench-fleet: all
	@echo "==> placing a fleet by content sketches against random (under a minute)"
	@$(VENV)/bin/python bench/fleet.py
bench-placement: all
	@echo "==> placement by reads under each policy, and read sampling's cost (about 17 min)"
	@$(VENV)/bin/python bench/placement.py
	@$(VENV)/bin/python bench/read_cost.py
bench-quick: all
	@echo "==> quick benchmarks: nuksm and kernel KSM side by side (about 8 min)"
	@$(VENV)/bin/python bench/run.py --quick
