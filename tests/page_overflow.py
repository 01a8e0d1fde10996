"""Which blocks of the built book scroll sideways in a browser window of a laptop's width.

One headless Chromium run loads every chapter and notebook page of a built book (``book/**`` and
``notebooks/*``) once, in an iframe as wide as a browser window (1366 px, 900 px high), waits for
MathJax and the widgets, and runs ``overflow_probe.js``; then it widens the frame to 1440 px and
runs it again. The probe reports every code block, output, table and display equation whose
``scrollWidth`` exceeds its ``clientWidth`` by more than 1 px, and the page itself when it scrolls
sideways. The harness page writes the JSON of all reports into
``<pre id="overflow-report">``, which ``--dump-dom`` returns (``--allow-file-access-from-files``
lets the harness read the pages it frames from ``file://``).

Used by tests/test_book_build.py; ``python tests/page_overflow.py HTML_DIR [OUT.json]`` prints
(and saves) the overflowing blocks of a book built elsewhere.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).with_name("overflow_probe.js")
WIDTHS = (1366, 1440)
HEIGHT = 900
HARNESS = "_overflow_harness.html"
REPORT = re.compile(r'<pre id="overflow-report" data-done="1">(.*?)</pre>', re.DOTALL)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--allow-file-access-from-files",
]

RUNNER = """
const PAGES = %(pages)s;
const WIDTHS = %(widths)s;
const SETTLE_MS = 1500;  // virtual time after MathJax: the widget manager renders asynchronously
const RESIZE_MS = 200;  // virtual time after a change of width: the theme's scripts react to it
const PARALLEL = 2;
const results = {};
let next = 0;
let left = PAGES.length;

function measure(page, frame, width) {
  let report;
  try {
    report = overflowReport(frame.contentDocument);
  } catch (err) {
    report = {error: String(err)};
  }
  (results[width] = results[width] || {})[page] = report;
}

// Each page loads once, in a frame as wide as the first window, and is measured at every width
// in turn: the frame's width is the window's for the page's media queries and layout.
function widthsOf(page, frame, i) {
  if (i === WIDTHS.length) {
    frame.remove();
    if (--left === 0) {
      const out = document.getElementById("overflow-report");
      out.textContent = JSON.stringify(results);
      out.dataset.done = "1";
    }
    pump();
    return;
  }
  frame.style.width = `${WIDTHS[i]}px`;
  setTimeout(() => {
    measure(page, frame, WIDTHS[i]);
    widthsOf(page, frame, i + 1);
  }, i === 0 ? SETTLE_MS : RESIZE_MS);
}

function start(page) {
  const frame = document.createElement("iframe");
  frame.style.cssText = `width:${WIDTHS[0]}px;height:%(height)dpx;border:0;display:block`;
  frame.onload = () => {
    const mj = frame.contentWindow.MathJax;
    const ready = mj && mj.startup && mj.startup.promise ? mj.startup.promise : Promise.resolve();
    ready.catch(() => {}).then(() => widthsOf(page, frame, 0));
  };
  frame.src = page;
  document.body.appendChild(frame);
}

function pump() {
  while (next < PAGES.length && document.querySelectorAll("iframe").length < PARALLEL) {
    start(PAGES[next++]);
  }
}
pump();
"""


def book_pages(html: Path) -> list[str]:
    """The chapter, appendix and notebook pages of a built book, relative to its html folder."""
    pages = sorted(html.glob("book/**/*.html")) + sorted(html.glob("notebooks/*.html"))
    return [p.relative_to(html).as_posix() for p in pages if not p.name.startswith("_")]


def _line(marker: str, n: int) -> str:
    return (marker + " " + "0123456789" * 20)[:n]


def _cell(code: str, output: str) -> str:
    """A notebook cell as myst-nb renders it: its code, and one line on standard output."""
    return (
        '<div class="cell docutils container"><div class="cell_input docutils container">'
        '<div class="highlight-ipython3 notranslate"><div class="highlight"><pre>'
        f'{code}</pre></div></div></div><div class="cell_output docutils container">'
        '<div class="output stream highlight-myst-ansi notranslate"><div class="highlight"><pre>'
        f"{output}</pre></div></div></div></div>"
    )


def _table(marker: str, columns: int) -> str:
    head = "".join(f"<th>{marker if i == 0 else f'col {i}'}</th>" for i in range(columns))
    # cells that cannot wrap (a fixed-width box, like an image): the table cannot be squeezed
    cell = '<span style="display:inline-block;width:6em">{}</span>'
    body = "".join(f"<td>{cell.format(123456.7 + i)}</td>" for i in range(columns))
    table = f'<table class="table"><thead><tr>{head}</tr></thead><tbody><tr>{body}</tr></tbody>'
    return f'<div class="output text_html">{table}</table></div>'


# The blocks write_wide_cells adds, by their first characters: those that must be reported.
WIDE = {
    "wide-code": "code",
    "wide-output": "output",
    "wide-table": "table",
    "wide-glued": "table",
    "wide-page": "page",
}
FITS = ("fits-code", "fits-output")


def write_wide_cells(html: Path, source: str = "notebooks/01_dimensions.html") -> str:
    """A copy of a built notebook page with blocks added at the top of its article: a cell whose
    code line and output line are 100 characters (they fit), one whose lines are 120 characters,
    a 24-column table in a cell's output and one glued on the page (too wide: each scrolls in its
    box), and a box 2000 px wide that makes the page scroll. Returns its path under ``html``."""
    page = html / source
    added = (
        _cell(_line("# fits-code", 100), _line("fits-output", 100))
        + _cell(_line("# wide-code", 120), _line("wide-output", 120))
        + '<div class="cell docutils container"><div class="cell_output docutils container">'
        + _table("wide-table", 24)
        + "</div></div>"
        + _table("wide-glued", 24)
        + '<div style="width: 2000px">wide-page</div>'
    )
    text = page.read_text()
    assert text.count('<article class="bd-article">') == 1, f"no article in {page}"
    out = page.with_name("_wide_cells.html")
    out.write_text(
        text.replace('<article class="bd-article">', '<article class="bd-article">' + added)
    )
    return out.relative_to(html).as_posix()


def write_harness(html: Path, pages: list[str], widths=WIDTHS, name: str = HARNESS) -> Path:
    """The harness page in ``html`` (so the framed pages load as they do for a reader)."""
    script = PROBE.read_text() + RUNNER % {
        "pages": json.dumps(pages),
        "widths": json.dumps(list(widths)),
        "height": HEIGHT,
    }
    path = html / name
    path.write_text(
        '<!doctype html><html><head><meta charset="utf-8"></head><body>'
        f'<pre id="overflow-report"></pre><script>{script}</script></body></html>'
    )
    return path


def measure(
    html: Path,
    chromium: str,
    profile: Path,
    pages: list[str] | None = None,
    widths=WIDTHS,
    name: str = HARNESS,
) -> dict[str, dict[str, dict]]:
    """``{width: {page: {"blocks": n, "overflowing": [...]}}}`` for ``pages`` (default all).
    Each page is loaded once and its frame widened from one width to the next: widths across one
    of the theme's breakpoints (992 and 1200 px) are measured faithfully only one call each."""
    pages = book_pages(html) if pages is None else pages
    harness = write_harness(html, pages, widths, name)
    budget = 20000 + 5000 * len(pages) * len(widths)
    proc = subprocess.run(
        [
            chromium,
            *FLAGS,
            f"--virtual-time-budget={budget}",
            f"--user-data-dir={profile}",
            "--dump-dom",
            harness.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = REPORT.search(proc.stdout)
    assert found, (
        f"the overflow harness did not finish (chromium exit {proc.returncode}):\n"
        f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
    return json.loads(html_lib.unescape(found.group(1)))


def overflowing(results: dict) -> list[str]:
    """One line per overflowing block: width, page, kind, size and first characters."""
    lines = []
    for width, pages in sorted(results.items()):
        for page, report in sorted(pages.items()):
            if "error" in report:
                lines.append(f"{width}px {page}: not measured: {report['error']}")
            for b in report.get("overflowing", []):
                lines.append(
                    f"{width}px {page}: {b['kind']} {b['scroll']}>{b['client']} px: {b['text']!r}"
                )
    return lines


def _chromium() -> str:
    for c in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
        if Path(c).is_file():
            return c
    raise SystemExit("no Chromium found")


if __name__ == "__main__":
    import tempfile
    import time

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        found = measure(Path(sys.argv[1]), _chromium(), Path(tmp) / "profile")
    print("\n".join(overflowing(found)))
    for width, pages in sorted(found.items()):
        n = sum(len(r.get("overflowing", [])) for r in pages.values())
        total = sum(r.get("blocks", 0) for r in pages.values())
        print(f"{width}px: {n} of {total} blocks overflow")
    print(f"measured in {time.monotonic() - t0:.1f} s")
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
