# SPDX-License-Identifier: GPL-2.0-or-later
"""Host settings a benchmark takes from nuksm's install: vm.max_map_count
as systemd/60-nuksm.conf sets it, since that is what a user who installed
nuksm has.  The value found is put back on restore() and at interpreter
exit (ksm.Ksm's signal handlers exit through it too)."""

import atexit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "systemd/60-nuksm.conf"


def installed_settings():
    """{sysctl name: value} of nuksm's sysctl.d file."""
    settings = {}
    for line in CONF.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")):
            name, value = (part.strip() for part in line.split("=", 1))
            settings[name] = value
    return settings


def path(name):
    return Path("/proc/sys") / name.replace(".", "/")


class InstalledSysctl:
    """nuksm's sysctl.d settings, applied now and undone on restore()."""

    def __init__(self):
        self.saved = {name: path(name).read_text().strip()
                      for name in installed_settings()}
        self.applied = installed_settings()
        for name, value in self.applied.items():
            path(name).write_text(value + "\n")
        print(f"bench: sysctl {self.applied} (nuksm's install), was "
              f"{self.saved}", flush=True)
        self._restored = False
        atexit.register(self.restore)

    def restore(self):
        if self._restored:
            return
        self._restored = True
        for name, value in self.saved.items():
            path(name).write_text(value + "\n")
        print(f"bench: sysctl restored: {self.saved}", flush=True)
