"""The Debian packages some tests use, installed only where that changes nothing the reader owns.

Used by ``make test`` (``python -m helpers.run.system_packages auto``) and ``make system-packages``
(``... install``), and by ``tests/test_system_packages.py``. The packages: ``chromium`` for the
rendered-page check (``tests/test_book_build.py``), ``openssh-server``, ``slurm-wlm`` and ``munge``
for Chapter 5's multi-node runs, whose daemons the tests start themselves inside namespace hosts
(``helpers/cluster/hosts.py``) and stop after.

* ``auto`` (``make test``): installs what is missing only on a machine that is not a personal one:
  root already (no ``sudo`` to type) and no systemd running (a container or CI, where no init
  system would start a service). Elsewhere it installs nothing and says how to opt in; the tests
  that need a package skip and say why.
* ``install`` (``make system-packages``, or ``BOOK_SYSTEM_PACKAGES=1 make test``): installs what is
  missing, with ``sudo`` when not root, and starts or enables no service: for the length of the
  install ``/usr/sbin/policy-rc.d`` answers 101 ("action forbidden", Debian's ``invoke-rc.d``
  protocol, ``/usr/share/doc/init-system-helpers/README.policy-rc.d``), and is removed after
  unless it was there before; where systemd runs, every unit the install enabled or started is
  disabled and stopped again. What it did is written to :data:`RECORD` for the test and for the
  reader (``apt-get remove`` of the packages it lists undoes it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = {  # package: the file that shows it is installed
    "chromium": "/usr/bin/chromium",
    "openssh-server": "/usr/sbin/sshd",
    "slurm-wlm": "/usr/sbin/slurmd",
    "munge": "/usr/sbin/munged",
}
UNITS = ("ssh.service", "ssh.socket", "munge.service", "slurmd.service", "slurmctld.service")
POLICY = Path("/usr/sbin/policy-rc.d")
RECORD = Path(os.environ.get("BOOK_SYSTEM_RECORD", ".venv/book-system-packages.json"))
OPT_IN = "make system-packages   (or: BOOK_SYSTEM_PACKAGES=1 make test)"


def missing() -> list[str]:
    return [p for p, path in PACKAGES.items() if not os.path.exists(path)]


def systemd_running() -> bool:
    """sd_booted(3): systemd is the init system when /run/systemd/system exists."""
    return os.path.isdir("/run/systemd/system")


def personal_machine() -> str | None:
    """Why this looks like a reader's own machine (None on a container or CI)."""
    if os.geteuid() != 0:
        return "installing would need sudo"
    if systemd_running():
        return "systemd runs here and would start the packages' services"
    return None


def unit_states() -> dict[str, dict[str, str]]:
    """``systemctl is-enabled`` and ``is-active`` of each unit the packages ship."""
    if not (systemd_running() and shutil.which("systemctl")):
        return {}
    out = {}
    for unit in UNITS:
        state = {}
        for verb in ("is-enabled", "is-active"):
            done = subprocess.run(["systemctl", verb, unit], capture_output=True, text=True)
            state[verb] = done.stdout.strip() or "unknown"
        out[unit] = state
    return out


def _sudo() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo"]


def install(packages: list[str]) -> dict:
    """apt-get install ``packages`` with no service started, and the units' state restored."""
    before = unit_states()
    had_policy = POLICY.exists()
    sudo = _sudo()
    t0 = time.monotonic()
    if not had_policy:
        script = "#!/bin/sh\n# written by the book's make test for one apt-get run\nexit 101\n"
        subprocess.run([*sudo, "sh", "-c", f"cat > {POLICY} && chmod 755 {POLICY}"],
                       input=script, text=True, check=True)  # fmt: skip
    try:
        env = ["env", "DEBIAN_FRONTEND=noninteractive"]
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True)
        subprocess.run([*sudo, *env, "apt-get", "install", "-y", "-qq",
                        "--no-install-recommends", *packages],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    finally:
        if not had_policy:
            subprocess.run([*sudo, "rm", "-f", str(POLICY)], check=False)
    restored = []
    for unit, state in unit_states().items():
        was = before.get(unit, {})
        if state["is-enabled"] == "enabled" and was.get("is-enabled") != "enabled":
            subprocess.run([*sudo, "systemctl", "disable", unit], capture_output=True)
            restored.append(f"{unit} disabled")
        if state["is-active"] == "active" and was.get("is-active") != "active":
            subprocess.run([*sudo, "systemctl", "stop", unit], capture_output=True)
            restored.append(f"{unit} stopped")
    return {
        "installed": packages,
        "policy_rc_d_was_there": had_policy,
        "units_before": before,
        "units_restored": restored,
        "seconds": round(time.monotonic() - t0, 1),
        "remove_with": f"apt-get remove {' '.join(packages)}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("auto", "install", "status"))
    mode = parser.parse_args(argv).mode
    need = missing()
    if mode == "status" or not need:
        print(f"==> system packages: {', '.join(need) or 'none'} missing")
        return 0
    why = personal_machine()
    if mode == "auto" and why:
        print(f"==> not installing {', '.join(need)}: {why}. The tests that need them skip and say "
              f"so. To install them (no service is started or enabled): {OPT_IN}")  # fmt: skip
        return 0
    print(
        f"==> installing Debian packages the tests use: {', '.join(need)} (no service started)",
        flush=True,
    )
    try:
        done = install(need)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"WARNING: could not install {', '.join(need)}: {e}; the tests that need them skip",
              file=sys.stderr)  # fmt: skip
        return 0
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(done, indent=1) + "\n")
    extra = f"; {', '.join(done['units_restored'])}" if done["units_restored"] else ""
    print(f"    done in {done['seconds']} s{extra}; what was installed: {RECORD} "
          f"(undo: {done['remove_with']})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
