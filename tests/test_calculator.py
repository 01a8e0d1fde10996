"""The calculator page (book/calculator.md) prints what helpers.cost prints, and runs offline.

* **The adapter** (:func:`helpers.cost.web.calculate`) on 60 random valid layouts in CPython: its
  memory, step time and ranking are those of ``memory_plan.peak``, ``step_time.plan_layout`` and
  ``planner.plan`` called directly, its parts add up, and its answer survives JSON.
* **The page's Python is the sources'.** ``helpers.zip`` holds :mod:`helpers.cost.web` and every
  module it imports at module level; run in a bare CPython (``-I -S``, no site-packages, torch
  and numpy absent, as in Pyodide) through the page's own ``boot.py`` it answers as the package
  does; a zip made from sources with one constant changed answers differently; and the zip and
  ``calculator.json`` in the built page equal what the current sources make, file by file.
* **In headless Chromium, as a reader uses it**: the calculator page of a build of that page alone
  (``jupyter-book build --toc`` with the book's ``_config.yml``, a few seconds; the whole book is
  built once, by ``tests/test_book_build.py``) is served on 127.0.0.1 as ``make serve`` does,
  loaded; a preset is chosen and T changed in the form; every value the page prints equals the
  CPython adapter's text for the same settings, to the last digit; the settings are in the
  address, and the address alone shows the same page; no request leaves the local server. From
  ``file://`` the page says to run ``make serve``. Chromium is driven over the DevTools protocol
  on a pipe (``--remote-debugging-pipe``, standard library only).

The time to the first result is printed (``-s`` shows it).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import random
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from helpers.chapters import calculator
from helpers.cost import web
from helpers.cost.memory_plan import peak
from helpers.cost.planner import enumerate_layouts, plan
from helpers.cost.step_time import plan_layout

ROOT = Path(__file__).resolve().parents[1]
BOOT = ROOT / "book" / "_static" / "calculator" / "boot.py"


def _random_settings(rng: random.Random, n: int) -> list[dict]:
    """``n`` settings of valid layouts: a preset's model and cluster, G and B drawn, then a layout
    the planner enumerates (so Colossal-AI's rules hold), with its recomputation."""
    presets = calculator.presets()
    out = []
    while len(out) < n:
        p = rng.choice(presets)["settings"]
        base = web.DEFAULTS | p | {"G": rng.choice([8, 16, 64]), "node": rng.choice([4, 8])}
        base["B"] = base["G"] * rng.choice([1, 2, 4])
        s = web.settings_of(base)
        model, hw = web.model_of(s), web.hardware_of(s)
        found = enumerate_layouts(model, s["G"], s["B"], gpus_per_node=hw.gpus_per_node)
        for layout, rc in rng.sample(found, min(3, len(found))):
            form = "keep" if not layout.reshard_after_forward else "reshard"
            form = "hsdp" if layout.shard_degree else form
            rcs = ["full"] if rc else ["none", "selective"]
            out.append(
                s
                | {"T": layout.tp, "P": layout.pp, "S": layout.sp, "v": layout.chunks}
                | {"sp": layout.sp_mode or "none", "zero": layout.zero_stage, "fsdp": form}
                | {"shard": layout.shard_degree or 0, "b": layout.microbatch}
                | {"rc": rng.choice(rcs), "pr": rng.choice(web.PRECISIONS)}
            )
    return out[:n]


SETTINGS = _random_settings(random.Random(36), 60)
_plan = functools.lru_cache(maxsize=None)(plan)  # the random layouts share a few rankings


@pytest.mark.parametrize("i", range(len(SETTINGS)))
def test_the_adapter_answers_what_the_models_answer(i):
    s = SETTINGS[i]
    got = web.calculate(s)
    assert "error" not in got, got
    assert json.loads(json.dumps(got)) == got
    model, hw = web.model_of(web.settings_of(s)), web.hardware_of(web.settings_of(s))
    layout, batch = web.layout_of(web.settings_of(s))
    assert not got["layout"]["violations"]
    mem = peak(model, layout, batch, s["rc"], hw.flash, hw.overhead_gib, precision=s["pr"])
    parts = got["memory"]["parts"]
    assert got["memory"]["total"] == mem["total"]
    assert sum(p["bytes"] for p in parts) == pytest.approx(mem["total"], rel=1e-12)
    assert [p["text"] for p in parts] == [f"{p['bytes'] / 2**30:.2f}" for p in parts]
    p = plan_layout(model, layout, batch, hw, s["rc"])
    assert got["step"]["step_s"] == p.step_s
    assert sum(q["s"] for q in got["step"]["parts"]) == pytest.approx(p.step_s, rel=1e-12)
    fits, count = _plan(model, s["G"], batch, hw)
    ranked = got["planner"]
    assert (ranked["count"], ranked["fit"]) == (count, len(fits))
    assert ranked["rows"] == [q.row(batch * model.seq_len) for q in fits[: s["top"]]]
    mine = [k for k, q in enumerate(fits) if (q.layout, q.recompute) == (layout, s["rc"])]
    assert ranked["rank"] == (mine[0] + 1 if mine else 0)
    if s["rc"] != "selective" and p.memory_gib <= hw.memory_gib:
        assert mine, "a layout the planner enumerates and that fits is in its ranking"


def test_precision_changes_the_bytes_and_fp16_costs_what_bf16_does():
    base = {"layers": 32, "hidden": 4096, "heads": 32, "ffn": 11008, "vocab": 32000, "seq": 4096}
    base |= {"G": 64, "T": 2, "P": 2, "B": 256, "b": 1, "zero": 1}
    got = {pr: web.calculate(base | {"pr": pr}) for pr in web.PRECISIONS}
    assert got["bf16"]["memory"]["total"] == got["fp16"]["memory"]["total"]
    assert got["fp32"]["memory"]["total"] > got["bf16"]["memory"]["total"]
    assert got["fp32"]["step"]["step_s"] > got["bf16"]["step"]["step_s"]  # wider collectives
    assert "pr must be one of" in web.calculate(base | {"pr": "fp8"})["error"]


def test_accumulation_sets_the_global_batch_and_bad_settings_say_why():
    s = SETTINGS[0] | {"m": 3}
    got = web.calculate(s)
    assert got["layout"]["m"] == 3 and got["layout"]["B"] == 3 * got["layout"]["D"] * s["b"]
    assert "does not divide" in web.calculate(SETTINGS[0] | {"G": 7, "T": 2})["error"]
    assert "unknown hardware" in web.calculate(SETTINGS[0] | {"hw": "tpu"})["error"]


# --- the Python the page runs ----------------------------------------------------------------


def _bare(zip_path: Path, settings: list[dict]) -> list[dict]:
    """The answers of ``zip_path`` through boot.py in a CPython without site-packages."""
    code = (
        "import json, runpy, sys\n"
        f"calc, _ = runpy.run_path({str(BOOT)!r})['start']({str(zip_path)!r})\n"
        "print(json.dumps([json.loads(calc(json.dumps(s))) for s in json.loads(sys.argv[1])]))\n"
        "mods = [v for m, v in sys.modules.items() if m.split('.')[0] == 'helpers']\n"
        f"assert all(v.__file__.startswith({str(zip_path)!r}) for v in mods)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, json.dumps(settings)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=zip_path.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_zip_runs_alone_as_the_package_does(tmp_path):
    files = calculator.sources()
    assert "helpers/cost/web.py" in files and "helpers/cost/memory_plan.py" in files
    assert not any(p.startswith(("helpers/notebook", "helpers/train")) for p in files)
    (tmp_path / "helpers.zip").write_bytes(calculator.zip_bytes(files))
    picked = SETTINGS[::12]
    assert _bare(tmp_path / "helpers.zip", picked) == [
        json.loads(json.dumps(web.calculate(s))) for s in picked
    ]
    # one constant of the memory model changed: the page's numbers follow the changed sources
    key = "helpers/cost/memory_plan.py"
    changed = files[key].replace(b"OUTSIDE_ALLOCATOR_GIB = 2.5", b"OUTSIDE_ALLOCATOR_GIB = 3.5")
    assert changed != files[key]
    (tmp_path / "changed.zip").write_bytes(calculator.zip_bytes(files | {key: changed}))
    other = _bare(tmp_path / "changed.zip", picked[:1])[0]
    assert other["memory"]["total"] == pytest.approx(
        web.calculate(picked[0])["memory"]["total"] + 2**30
    )


def test_the_zip_is_made_from_the_bytes_alone():
    assert calculator.zip_bytes() == calculator.zip_bytes()
    data = calculator.page_data()
    assert data["zip"]["sha256"] == hashlib.sha256(calculator.zip_bytes()).hexdigest()
    assert {p["key"] for p in data["presets"]} >= {"flagship", "llama-2-7b", "llama-3-405b"}
    for p in data["presets"]:
        assert "error" not in web.calculate(data["defaults"] | p["settings"]), p["key"]


# --- the built page in Chromium ----------------------------------------------------------------


@pytest.fixture(scope="module")
def page_html(tmp_path_factory) -> Path:
    """The calculator page built alone with the book's configuration (its html folder)."""
    for f in calculator.PYODIDE_FILES:
        assert (ROOT / "_offline" / "pyodide" / f).is_file(), f"_offline/pyodide/{f}: make venv"
    out = tmp_path_factory.mktemp("calculator")
    toc = out / "_toc.yml"
    toc.write_text("format: jb-book\nroot: book/calculator\n")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    jb = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run(
        [str(jb), "build", str(ROOT), "--toc", str(toc), "--path-output", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    html = out / "_build" / "html"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return html


@pytest.mark.slow
def test_the_built_page_carries_the_current_sources(page_html):
    static = page_html / "_static" / "calculator"
    zipped = (static / "helpers.zip").read_bytes()
    assert zipped == calculator.zip_bytes(), "helpers.zip differs from the sources: rebuild"
    with zipfile.ZipFile(io.BytesIO(zipped)) as z:
        inside = {n: z.read(n) for n in z.namelist()}
    assert inside == {p: (ROOT / p).read_bytes() for p in inside}
    assert json.loads((static / "calculator.json").read_text()) == json.loads(
        json.dumps(calculator.page_data())
    )
    for f in calculator.PYODIDE_FILES:
        assert (page_html / "_static" / "pyodide" / f).is_file(), f


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(page_html):
    """The built page on http://127.0.0.1:PORT/, as ``make serve`` serves _build/html."""
    handler = functools.partial(_Quiet, directory=str(page_html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


class Chromium:
    """Headless Chromium over the DevTools protocol on a pipe (fds 3 and 4 of the child)."""

    def __init__(self, binary: str, profile: Path):
        to_child, self._into = os.pipe()
        self._out, from_child = os.pipe()

        def fds():  # the child's fd 3 reads commands, fd 4 writes answers
            a, b = os.dup(to_child), os.dup(from_child)
            os.dup2(a, 3)
            os.dup2(b, 4)

        from test_book_build import CHROMIUM_FLAGS

        flags = [f for f in CHROMIUM_FLAGS if not f.startswith("--virtual-time")]
        self.proc = subprocess.Popen(
            [binary, *flags, "--remote-debugging-pipe", f"--user-data-dir={profile}"],
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._id, self._buf, self.events = 0, b"", []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.send("Network.enable", session=True)
        self.send("Page.enable", session=True)

    def send(self, method: str, session: bool = False, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._into, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]
            self.events.append(reply)

    def _read(self) -> dict:
        while b"\0" not in self._buf:
            chunk = os.read(self._out, 1 << 16)
            assert chunk, "Chromium closed the pipe"
            self._buf += chunk
        line, self._buf = self._buf.split(b"\0", 1)
        return json.loads(line)

    def js(self, expr: str):
        got = self.send(
            "Runtime.evaluate", session=True, expression=expr, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in got, got["exceptionDetails"]
        return got["result"].get("value")

    def wait(self, expr: str, timeout: float = 180.0):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            value = self.js(expr)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(
            f"timed out waiting for {expr}: {self.js('JSON.stringify(window.calculator)')}"
        )

    def goto(self, url: str) -> None:
        self.send("Page.navigate", session=True, url=url)

    def requests(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self._into)
        os.close(self._out)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from test_book_build import _chromium

    chrome = Chromium(_chromium(), tmp_path_factory.mktemp("chromium") / "profile")
    yield chrome
    chrome.close()


# what the page prints: every element with a data-key, key -> text
SHOWN = (
    "Object.fromEntries([...document.querySelectorAll('#calculator [data-key]')]"
    ".map(e => [e.dataset.key, e.textContent]))"
)


def _expected(result: dict) -> dict:
    """The texts the page prints for an adapter answer, by the keys calculator.js gives them."""
    out = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}{k}.", v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(f"{prefix}{i}.", v)
        else:
            out[prefix[:-1]] = value

    walk("", result)
    return out


def _check_shown(shown: dict, result: dict) -> None:
    expected = _expected(result)
    for key, text in shown.items():
        if key == "memory.fits":
            assert text == ("fits" if result["memory"]["fits"] else "does not fit")
        else:
            assert key in expected, key
            assert text == str(expected[key]), (key, text, expected[key])
    cells = sum(len(row) for row in result["planner"]["cells"])
    assert len([k for k in shown if k.startswith("planner.cells.")]) == cells
    assert len([k for k in shown if k.startswith("memory.parts.")]) == len(
        result["memory"]["parts"]
    )


def _same(a, b, where="answer") -> None:
    """Equal to the last bit. Pyodide runs CPython 3.14, whose ``sum()`` adds floats with
    compensation (3.12 on): a model that adds floats with ``sum()`` answers differently in the last
    bit there, and its planner may order two equally fast layouts differently. The modules the page
    runs add floats in plain loops."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: the page has {a!r}, CPython {b!r}"


def _choose(browser: Chromium, key: str, value) -> None:
    before = browser.js("window.calculator.results")
    browser.js(
        f"(() => {{ const e = document.getElementById('calc-{key}');"
        f" e.value = {json.dumps(str(value))}; e.dispatchEvent(new Event('change')); }})()"
    )
    browser.wait(f"window.calculator.results > {before} && !window.calculator.busy")


@pytest.mark.slow
def test_the_page_in_chromium_prints_the_adapters_numbers_offline(browser, served):
    page = served + "book/calculator.html"
    t0 = time.monotonic()
    browser.goto(page)
    browser.wait("window.calculator && (window.calculator.ready || window.calculator.error)", 240)
    assert not browser.js("window.calculator.error || ''")
    timings = browser.js("window.calculator.timings")
    print(
        f"calculator: first result {timings['first'] / 1000:.2f} s after the script started "
        f"(Pyodide ready at {timings['pyodide'] / 1000:.2f} s; {time.monotonic() - t0:.1f} s wall)"
    )
    for preset, T in (("llama-2-7b", 2), ("MEG-39.1B", 4)):  # a model, a published training
        _choose(browser, "preset", preset)
        _choose(browser, "T", T)
        state = browser.js("window.calculator.state")
        assert state["preset"] == preset and int(state["T"]) == T
        result = json.loads(json.dumps(web.calculate(state)))
        assert result["planner"]["rows"] and not result["layout"]["violations"]
        _same(browser.js("window.calculator.last"), result)
        _check_shown(browser.js(SHOWN), result)
    # the address alone shows the same configuration
    url = browser.js("location.href")
    assert "T=4" in url and "preset=MEG-39.1B" in url
    browser.goto("about:blank")
    browser.goto(url)
    browser.wait("window.calculator && window.calculator.ready", 240)
    _same(browser.js("window.calculator.last"), result)
    _check_shown(browser.js(SHOWN), result)
    outside = [u for u in browser.requests() if not u.startswith((served, "data:", "blob:"))]
    assert not [u for u in outside if u != "about:blank"], outside


@pytest.mark.slow
def test_from_a_file_the_page_says_to_serve_it(page_html, browser):
    browser.goto((page_html / "book" / "calculator.html").as_uri())
    text = browser.wait(
        "(document.querySelector('.calc-status[data-state=file]') || {}).textContent"
    )
    assert "make serve" in text
