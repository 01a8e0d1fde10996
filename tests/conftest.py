"""At the end of a test run, one summary of what was skipped because this machine lacks a system
package, and the command that enables it (helpers/run/system_packages.py)."""

from helpers.run.system_packages import OPT_IN

WORDS = ("Chromium", "sshd", "SLURM", "munge", "not installed")


def pytest_terminal_summary(terminalreporter):
    skipped = terminalreporter.stats.get("skipped", [])
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
        reason = reason.removeprefix("Skipped: ")
        if any(w in reason for w in WORDS):
            reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        terminalreporter.section("skipped for missing system packages")
        for reason, count in sorted(reasons.items()):
            terminalreporter.write_line(f"{count:3d} × {reason}")
        terminalreporter.write_line(f"install them (no service is started): {OPT_IN}")
