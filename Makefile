# nuksm: NUMA-aware memory deduplication for QEMU/KVM.
#
#   make            install dependencies, build QEMU + nuksmd + nuksmctl
#   make check      ... and run every test suite
#   make demo       ... and boot two small VMs attached to a live agent
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

.PHONY: all deps tools qemu guest check check-unit check-qtest \
        check-integration demo clean distclean

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

check: all guest
	@$(MAKE) --no-print-directory check-unit check-qtest check-integration

check-unit:
	@echo "==> unit tests (libnuksm)"
	@$(MESON) test -C $(BUILD)/meson --print-errorlogs

check-qtest:
	@echo "==> qtest (nuksm object, real nuksmd)"
	@QTEST_QEMU_BINARY=$(NUKSM_QEMU) timeout 600 $(QTEST) --tap -k

check-integration:
	@echo "==> integration tests (pytest, qemu.qmp, real guests)"
	@$(VENV)/bin/python -m pytest tests/integration

demo: all guest
	@$(VENV)/bin/python scripts/demo.py

clean:
	rm -rf $(BUILD)/meson $(BUILD)/qemu $(BUILD)/bin $(BUILD)/guest \
	       $(BUILD)/demo

distclean:
	rm -rf $(BUILD)
