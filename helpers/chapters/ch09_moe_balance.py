"""Chapter 9, "Balancing the experts": the single-process reference of the balancing runs, their
per-step load and drop rate, and the curves that
:func:`helpers.figures.ch09_moe.balance_figure` draws (:func:`lines`).

Used by ``notebooks/09_quick_demos.ipynb`` and ``tests/test_ch09_moe_balance.py``.
``helpers/demos/ch09_moe_balance.py`` trains one MoE layer on expert-parallel ranks with no
balancing, with the Switch Transformer's auxiliary loss, or with DeepSeek-V3's bias;
:func:`reference` trains the same layer in one process, every rank's tokens one group of the
whole layer (:class:`helpers.parallel.ep.MoELayer`), and must make the same routing decisions at
every step. A rank's history reads ``routed[step][expert]`` (the choices its tokens sent to each
expert) and ``kept[step][expert]`` (those within the capacity); :func:`by_run` gathers the ranks.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
import yaml

from helpers.parallel.ep import MoELayer, imbalance, toy_batch, update_bias
from helpers.run.result_types.ch09 import MoeBalanceResult

RUNS = ("none", "aux:0.01", "aux:0.1", "bias:0.005")
SETTINGS = dict(experts=8, k=2, tokens=64, hidden=16, ffn=32, capacity_factor=1.0, skew=3.0)
SETTINGS |= dict(steps=100, lr=0.5)
LABELS = {"none": "no balancing", "aux": "auxiliary loss", "bias": "bias (no loss)"}
SOURCES = Path(__file__).resolve().parents[1] / "data" / "moe_sources.yaml"


def sources() -> dict[str, dict]:
    """The quoted sentences of ``helpers/data/moe_sources.yaml`` by key; every entry must carry a
    claim, a source, a URL and the quote."""
    entries = yaml.safe_load(SOURCES.read_text())["sources"]
    for e in entries:
        missing = [f for f in ("key", "claim", "source", "url", "quote") if not e.get(f)]
        if missing or not e["url"].startswith("https://"):
            raise ValueError(f"{SOURCES.name}: entry {e.get('key')!r} lacks {missing or 'a URL'}")
    return {e["key"]: e for e in entries}


@contextlib.contextmanager
def _float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def reference(world: int = 4, runs=RUNS, **settings) -> list[dict]:
    """The balancing runs in one process: per run, every group's history, as :func:`by_run`
    gives the launched ranks'."""
    s = SETTINGS | settings
    out = []
    with _float64():
        for text in runs:
            method, _, value = text.partition(":")
            coef = float(value or 0)
            layer = MoELayer(s["hidden"], s["ffn"], s["experts"], s["k"], s["capacity_factor"])
            bias = torch.zeros(s["experts"])
            seen = {key: [[] for _ in range(world)] for key in ("routed", "kept", "loss", "aux")}
            for step in range(s["steps"]):
                total, load = 0.0, torch.zeros(s["experts"], dtype=torch.long)
                for r in range(world):
                    x, target = toy_batch(step, r, world, s["tokens"], s["hidden"], s["skew"])
                    y, routing, aux = layer(x, bias if method == "bias" else None)
                    task = ((y - target) ** 2).mean()
                    total = total + (task + coef * aux if method == "aux" else task) / world
                    load += routing.routed_per_expert(s["experts"])
                    seen["routed"][r].append(routing.routed_per_expert(s["experts"]).tolist())
                    seen["kept"][r].append(routing.kept_per_expert(s["experts"]).tolist())
                    seen["loss"][r].append(task.item())
                    seen["aux"][r].append(aux.item())
                layer.zero_grad()
                total.backward()
                with torch.no_grad():
                    for p in layer.parameters():
                        p -= s["lr"] * p.grad
                if method == "bias":
                    bias = update_bias(bias, load, coef)
            out.append({"method": method, "coef": coef, **seen, "bias": bias.tolist()})
    return out


def by_run(results: list[MoeBalanceResult]) -> list[dict]:
    """The launched ranks' results as :func:`reference` gives them: per run, lists over ranks."""
    ranks = sorted(results, key=lambda r: r["rank"])
    out = []
    for i, run in enumerate(ranks[0]["runs"]):
        keys = ("routed", "kept", "loss", "aux")
        gathered = {key: [r["runs"][i][key] for r in ranks] for key in keys}
        out.append({"method": run["method"], "coef": run["coef"], **gathered, "bias": run["bias"]})
    return out


def differences(launched: list[dict], ref: list[dict], tolerance: float = 1e-12) -> list[dict]:
    """Per run: do the routing decisions (routed, kept, bias) equal the reference's at every
    step, and are the task losses within ``tolerance``."""
    rows = []
    for a, b in zip(launched, ref):
        gap = max(abs(x - y) for la, lb in zip(a["loss"], b["loss"]) for x, y in zip(la, lb))
        rows.append(
            {
                "run": name(a),
                "routing equal at every step": a["routed"] == b["routed"]
                and a["kept"] == b["kept"],
                "bias equal": a["bias"] == b["bias"],
                f"task losses within {tolerance:g}": gap < tolerance,
            }
        )
    return rows


def name(run: dict) -> str:
    coef = {"aux": f", weight {run['coef']:g}", "bias": f", γ = {run['coef']:g}"}
    return LABELS[run["method"]] + coef.get(run["method"], "")


def series(run: dict) -> dict:
    """Per step: the whole step's load per expert, its max/mean, the drop rate (choices past the
    capacity over all choices) and the mean task loss over the groups."""
    steps = range(len(run["routed"][0]))
    load = [[sum(g[t][e] for g in run["routed"]) for e in range(len(run["routed"][0][0]))]
            for t in steps]  # fmt: skip
    routed = [sum(map(sum, (g[t] for g in run["routed"]))) for t in steps]
    kept = [sum(map(sum, (g[t] for g in run["kept"]))) for t in steps]
    return {
        "load": load,
        "max_over_mean": [imbalance(torch.tensor(x)) for x in load],
        "drop_rate": [1 - k / r for k, r in zip(kept, routed)],
        "loss": [sum(g[t] for g in run["loss"]) / len(run["loss"]) for t in steps],
    }


def summary(runs: list[dict], last: int = 10) -> list[dict]:
    """Per run: max/mean and drop rate at the first step and averaged over the ``last`` steps."""
    rows = []
    for run in runs:
        s = series(run)

        def tail(key):
            return sum(s[key][-last:]) / last

        rows.append(
            {
                "run": name(run),
                "max/mean, step 1": round(s["max_over_mean"][0], 3),
                f"max/mean, last {last}": round(tail("max_over_mean"), 3),
                "dropped, step 1 (%)": round(100 * s["drop_rate"][0], 2),
                f"dropped, last {last} (%)": round(100 * tail("drop_rate"), 2),
                f"task loss, last {last}": round(tail("loss"), 4),
            }
        )
    return rows


def capacity_sweep(routed: list[list[int]], k: int, tokens: int, factors) -> list[dict]:
    """The drop rate of one step's routing (``routed[group][expert]``) had each expert offered
    C = ⌈φ·k·n_tok/n_exp⌉ slots per group: Σ max(0, routed - C) / (k·n_tok·groups)."""
    from helpers.cost.moe import buffer_slots

    experts = len(routed[0])
    rows = []
    for phi in factors:
        cap = buffer_slots(tokens, k, experts, phi) // experts
        dropped = sum(max(0, n - cap) for g in routed for n in g)
        rows.append({"φ": phi, "C": cap, "dropped (%)": 100 * dropped / (k * tokens * len(routed))})
    return rows


def lines(runs: list[dict]) -> list[dict]:
    """Per run, what :func:`helpers.figures.ch09_moe.balance_figure` draws: its method, its name
    (:func:`name`) and its :func:`series`."""
    return [{"method": run["method"], "name": name(run), **series(run)} for run in runs]
