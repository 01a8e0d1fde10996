"""The whole book builds with warnings as errors, and its pages render offline in a browser.

The book is built once per test session into a temporary folder (``--path-output``), from the
notebooks' stored outputs (``execute_notebooks: "off"``), exactly as ``make book`` does. Then
headless Chromium (Debian ``chromium``, headless flags below) loads the built Chapter 1
pages from ``file://`` with background networking off and dumps the DOM after MathJax and the
widget manager have run, so the checks see what a reader sees:

* math rendered by MathJax (``<mjx-container``), with no MathJax error;
* at least one figure ``<img>`` whose source is a ``data:`` URI or a local file;
* widgets stored in the notebook rendered by the local ipywidgets HTML manager;
* no script or stylesheet from a CDN: MathJax, RequireJS and embed-amd.js are served from
  ``_static/`` (sphinx-mathjax-offline and the ``_offline/`` JavaScript of ``make venv``);
* nothing scrolls sideways at a laptop's width: in windows 1366 and 1440 px wide, no code block,
  output, table or display equation of any chapter, appendix or notebook page is wider than the
  column (book/_static/book.css sets the geometry; tests/page_overflow.py measures every page in
  one Chromium run and names each block that remains), and the same check does report a code
  line, an output line, tables and a box made too wide on purpose, while 100-character lines
  fit.

Without Chromium these tests skip and say how to install it (``make system-packages``), or fail
with ``BOOK_REQUIRE_BROWSER=1`` (CI); ``BOOK_SKIP_BROWSER=1`` skips them on purpose.
``BOOK_CHROMIUM`` names another Chromium/Chrome binary.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import page_overflow
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_dimensions.ipynb"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=10000",
]
REMOTE = re.compile(r"^(https?:)?//", re.IGNORECASE)
SCRIPT_SRC = re.compile(r"<script\b[^>]*\bsrc=\"([^\"]+)\"", re.IGNORECASE)
LINK_HREF = re.compile(
    r"<link\b[^>]*\brel=\"(?:stylesheet|preload|modulepreload)\"[^>]*\bhref=\"([^\"]+)\"",
    re.IGNORECASE,
)
IMG_SRC = re.compile(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", re.IGNORECASE)


def _jupyter_book() -> str:
    here = Path(sys.executable).with_name("jupyter-book")
    found = str(here) if here.exists() else shutil.which("jupyter-book")
    assert found, "jupyter-book not found: run `make venv` and test with .venv/bin/python"
    return found


@pytest.fixture(scope="session")
def built_html(tmp_path_factory) -> Path:
    """Build the book once (``jupyter-book build . -W -n --keep-going``); return its html dir."""
    assert (ROOT / "_offline" / "widgets" / "embed-amd.js").is_file(), (
        "offline widget JavaScript missing in _offline/widgets/: run `make venv`"
    )
    out = tmp_path_factory.mktemp("book")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    proc = subprocess.run(
        [
            _jupyter_book(),
            "build",
            str(ROOT),
            "-W",
            "-n",
            "--keep-going",
            "--path-output",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"book build failed (exit {proc.returncode}):\n{log[-8000:]}"
    html = out / "_build" / "html"
    assert (html / "index.html").is_file(), f"no index.html in {html}:\n{log[-4000:]}"
    return html


def _chromium() -> str:
    if os.environ.get("BOOK_SKIP_BROWSER") == "1":
        pytest.skip("BOOK_SKIP_BROWSER=1: rendered-page check in Chromium SKIPPED")
    candidates = [os.environ.get("BOOK_CHROMIUM"), "/usr/bin/chromium"]
    candidates += [shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    why = (
        "Chromium not found (/usr/bin/chromium): install it with `make system-packages`, or set "
        "BOOK_CHROMIUM=/path/to/chrome"
    )
    if os.environ.get("BOOK_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{why} (BOOK_REQUIRE_BROWSER=1)")
    pytest.skip(why)


def _dump_dom(page: Path, tmp_path: Path) -> str:
    assert page.is_file(), f"page not built: {page}"
    proc = subprocess.run(
        [
            _chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0 and "<html" in proc.stdout, (
        f"chromium failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def _remote(urls: list[str]) -> list[str]:
    return [u for u in urls if REMOTE.match(u)]


def test_book_builds(built_html: Path):
    for page in ("book/intro.html", "book/01_dimensions.html", "notebooks/01_dimensions.html"):
        assert (built_html / page).is_file(), f"{page} missing from the built book"


def test_offline_assets_are_served_locally(built_html: Path):
    assert (built_html / "_static" / "mathjax" / "tex-chtml.js").is_file(), (
        "MathJax not copied to _static/"
    )
    assert (built_html / "_static" / "widgets" / "embed-amd.js").is_file()
    assert (built_html / "_static" / "widgets" / "require.js").is_file()
    remote = {}
    for page in built_html.rglob("*.html"):
        text = page.read_text(errors="replace")
        urls = _remote(SCRIPT_SRC.findall(text) + LINK_HREF.findall(text))
        if urls:
            remote[str(page.relative_to(built_html))] = urls
    assert not remote, f"pages load scripts/styles from the network: {remote}"
    text = (built_html / "notebooks" / "01_dimensions.html").read_text()
    srcs = SCRIPT_SRC.findall(text)
    for name in ("mathjax", "require", "embed-amd"):
        if name == "mathjax" or _has_widgets():
            hits = [s for s in srcs if name in s.lower()]
            assert hits and not _remote(hits), f"{name}: script sources {hits}"


def _has_widgets() -> bool:
    return bool(json.loads(NOTEBOOK.read_text()).get("metadata", {}).get("widgets"))


def test_chapter1_notebook_page_renders(built_html: Path, tmp_path: Path):
    dom = _dump_dom(built_html / "notebooks" / "01_dimensions.html", tmp_path)
    assert dom.count("<mjx-container") > 0, (
        "no math rendered by MathJax on the Chapter 1 notebook page"
    )
    assert "<mjx-merror" not in dom, "MathJax reported a TeX error"
    imgs = [s for s in IMG_SRC.findall(dom) if not s.endswith((".svg", ".ico"))]
    local = [s for s in imgs if s.startswith("data:") or not REMOTE.match(s)]
    assert local, f"no figure <img> with a data: or local source (img sources: {imgs})"
    for src in local:
        if not src.startswith("data:"):
            target = (built_html / "notebooks" / src.split("?")[0]).resolve()
            assert target.is_file(), f"image {src} not found at {target}"
    assert not _remote(SCRIPT_SRC.findall(dom)), (
        f"CDN scripts in the DOM: {_remote(SCRIPT_SRC.findall(dom))}"
    )
    if _has_widgets():
        assert re.search(r'class="[^"]*\blm-Widget\b[^"]*\bwidget-', dom), (
            "the notebook stores widget state but no widget was rendered (ipywidgets HTML manager)"
        )


def test_chapter1_page_renders_math(built_html: Path, tmp_path: Path):
    dom = _dump_dom(built_html / "book" / "01_dimensions.html", tmp_path)
    assert dom.count("<mjx-container") > 0, "no math rendered by MathJax on book/01_dimensions.html"
    assert "<mjx-merror" not in dom, "MathJax reported a TeX error"


@pytest.fixture(scope="module")
def overflow(built_html: Path, tmp_path_factory) -> dict:
    """Every chapter, appendix and notebook page, and a copy of one with blocks made too wide on
    purpose, measured at 1366 and 1440 px in one Chromium run."""
    chromium = _chromium()
    pages = page_overflow.book_pages(built_html)
    wide = page_overflow.write_wide_cells(built_html)
    t0 = time.monotonic()
    profile = tmp_path_factory.mktemp("overflow") / "profile"
    found = page_overflow.measure(built_html, chromium, profile, [*pages, wide])
    print(f"overflow check: {len(pages) + 1} pages, 2 widths, {time.monotonic() - t0:.1f} s")
    return {"pages": pages, "wide": wide, "found": found}


def test_nothing_scrolls_sideways_at_1366_and_1440_px(overflow):
    found, wide = overflow["found"], overflow["wide"]
    for width in page_overflow.WIDTHS:
        assert sorted(found[str(width)]) == sorted([*overflow["pages"], wide]), width
    book = {w: {p: r for p, r in pages.items() if p != wide} for w, pages in found.items()}
    lines = page_overflow.overflowing(book)
    assert not lines, (
        f"{len(lines)} blocks are wider than the page's column (code and output lines: at most "
        "100 characters; tables: show_table, split or helpers.notebook.tables.transposed):\n"
        + "\n".join(lines)
    )


def test_the_check_reports_blocks_made_too_wide_on_purpose(overflow):
    for width in page_overflow.WIDTHS:
        report = overflow["found"][str(width)][overflow["wide"]]
        marked = (*page_overflow.WIDE, *page_overflow.FITS)
        seen = {m: b["kind"] for b in report["overflowing"] for m in marked if m in b["text"][:20]}
        assert seen == page_overflow.WIDE, f"{width} px: {report}"
