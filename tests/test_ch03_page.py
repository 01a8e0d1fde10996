"""Chapter 3's page: every number it quotes is glued from the notebook, the stored glue is what the
book's helpers compute today, and each claim the page makes in words holds for those numbers."""

import ast
import json
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

from helpers.chapters import ch03_earlier, ch03_numbers, ch03_records, ch03_strategy
from helpers.cost import comm, memory_plan, planner
from helpers.cost.step_time import Hardware, members_per_node, plan_layout
from helpers.parallel.pp import bubble_fraction

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "book" / "03_strategy.md").read_text()
FLAT = " ".join(PAGE.split())  # line breaks of the page do not matter
NOTEBOOK = ROOT / "notebooks" / "03_strategy.ipynb"
ROLE = re.compile(r"\{glue:text\}`\.\./notebooks/03_strategy\.ipynb::(ch03-[a-z0-9-]+):([^`]*)`")
GIB = 2**30


def g(key: str, fmt: str = "s") -> str:
    """The page's role that pastes ``key`` (``ch03-`` left out) with ``fmt``."""
    return f"{{glue:text}}`../notebooks/03_strategy.ipynb::ch03-{key}:{fmt}`"


@lru_cache
def stored() -> dict:
    """Every number the stored notebook glues (display=False), as Python values."""
    nb = json.loads(NOTEBOOK.read_text())
    out = {}
    for c in nb["cells"]:
        for o in c.get("outputs", []) if c["cell_type"] == "code" else []:
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            text = o.get("data", {}).get("application/papermill.record/text/plain")
            if name and text is not None and not "".join(text).startswith("<"):
                out[name] = ast.literal_eval("".join(text))  # a number or a string, not a display
    return out


@lru_cache
def computed() -> dict:
    return ch03_numbers.numbers()


def _glued_tables() -> set[str]:
    nb = json.loads(NOTEBOOK.read_text())
    return {
        o["metadata"]["scrapbook"]["name"]
        for c in nb["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if "scrapbook" in o.get("metadata", {})
    }


def test_page_is_complete():
    assert "This chapter is an outline" not in PAGE
    for key in (
        "ch03_volumes",
        "ch03_link_times",
        "ch03_egress",
        "ch03_egress_fig",
        "ch03_busbw",
        "ch03_nccl_table",
        "ch03_share_table",
        "ch03_seed_vs_planner",
        "ch03_plan_70b",
        "ch03_memory_70b",
        "ch03_validation",
    ):
        assert f"```{{glue}} {key}\n:doc: ../notebooks/03_strategy.ipynb" in PAGE
        assert key in _glued_tables(), key
    assert "```{glue} ch03_flowchart\n:doc: ../notebooks/03_strategy.ipynb" in PAGE
    assert "ch03_flowchart" in _glued_tables()
    assert (
        "## Summary" in PAGE
        and "## Exercises" in PAGE
        and "Answers to the numeric exercises" in PAGE
    )


def test_every_glued_number_is_stored_current_and_formats():
    """Each {glue:text} of the page names a number the stored notebook glues; the stored value is
    what the helpers compute now (a stale notebook fails here); its format spec applies."""
    from myst_nb.core.variables import format_plain_text

    used = ROLE.findall(PAGE)
    assert len(used) > 80
    values = stored()
    for key, fmt in used:
        assert key in values, f"{key} is not glued in the stored notebook"
        assert fmt, f"{key} needs a format spec (myst-nb splits the key at the last colon)"
        format_plain_text(repr(values[key]), fmt)
    fresh = computed()
    for key, value in fresh.items():
        assert values.get(key) == value, (key, values.get(key), value)


def test_no_planner_number_is_typed():
    """The numbers the model changed are pasted, not typed."""
    for typed in (
        "858 layouts",
        "316 that fit",
        "71.7 of",
        "tenth of twelve",
        "0.6 s at 50 GB/s",
        "528.3",
        "123 of 858",
        "ranks 37th",
        "about 48 GiB",
        "29 GB per rank",
    ):
        assert typed not in FLAT, typed


def test_page_quotes_the_seed_output():
    for line in planner.seed_report(32, 7.5).splitlines():
        assert line in PAGE


def test_node_egress_claims():
    """The 7.5 B model's gradient all-reduce over 4 nodes of 8 leaves each node once through its 8
    cards: under 0.1 s, where one card per rank takes ~0.59 s; T = 2 does not halve it; a group
    with one member per node has one card."""
    hw = Hardware()
    grads = planner.SEED_7B5.params * 2
    k = members_per_node({"dp": 32, "tp": 1}, ("dp",), 8)
    t = comm.collective_time("all_reduce", grads, 32, hw.link("all_reduce", 32, k))
    one = comm.collective_time("all_reduce", grads, 32, hw.inter)
    assert k == 8 and t < 0.1 and 0.55 < one < 0.6
    n = computed()
    assert n["ch03-dp32-ms"] == pytest.approx(t * 1e3, abs=1e-3)
    assert n["ch03-dp32-one-card-ms"] == pytest.approx(one * 1e3, abs=1e-3)
    assert n["ch03-dp32-sent-gb"] == pytest.approx(2 * 31 / 32 * grads / 1e9, abs=1e-3)
    rows = {r["T"]: r for r in ch03_strategy.egress_rows()}
    assert [rows[t]["cards per group"] for t in (1, 2, 4, 8)] == [8, 4, 2, 1]
    assert rows[2]["ms"] == pytest.approx(rows[1]["ms"], rel=0.05)
    assert rows[2]["GB each rank sends"] == pytest.approx(
        rows[1]["GB each rank sends"] / 2, rel=0.05
    )
    assert rows[2]["ms, one card per rank"] < 0.5 * rows[1]["ms, one card per rank"]
    links = ch03_strategy.link_rows()
    one_per_node = [r for r in links if r["placement"] == "8 nodes × 1"]
    assert one_per_node and all(r["link"] == "1 card per group" for r in one_per_node)
    assert any(r["link"] == "8 cards per group" and r["ms"] == round(t * 1e3, 1) for r in links)
    assert {r["link"] for r in links if r["traffic"].startswith("Ulysses")} == {
        "NVLink",
        "1 card per rank",
    }
    ib_row = next(r for r in links if r["placement"] == "8 nodes × 1" and "DP" in r["traffic"])
    assert ib_row["ms"] == 528.3  # the 8-rank all-reduce with one card: now one member per node
    assert (
        f"it takes {g('dp32-ms', '.0f')} ms and runs during the last micro-batch's backward" in FLAT
    )
    assert (
        f"the all-reduce takes {g('t2-ms', '.0f')} ms instead of {g('dp32-ms', '.0f')} ms" in FLAT
    )
    assert "does not shrink the traffic between nodes" in FLAT


def test_tensor_parallelism_is_argued_by_latency():
    n = computed()
    assert n["ch03-tp16-ms"] < 1.5 * n["ch03-tp-node-ms"] < n["ch03-tp-one-card-ms"]
    assert n["ch03-ib-alpha-us"] > n["ch03-nv-alpha-us"] and n["ch03-tp-ops"] == 4 * 36
    assert "**Keep tensor parallelism inside a node — for its latency, not its bytes.**" in FLAT
    assert "**Topology is missing, and what it decides is latency on the critical path.**" in FLAT
    assert "one GPU on each of 8 nodes" in FLAT and g("tp-one-card-ms", ".0f") in FLAT


def test_seed_vs_planner_claims():
    rows = planner.seed_vs_planner()
    by = {r["dp×tp×pp"]: r for r in rows}
    first = by["32×1×1"]
    assert first["planner rank"] <= 2 and first["seed fits"] == "no" and first["memory GiB"] < 80
    n = computed()
    assert n["ch03-dp-rank"] == ch03_strategy.ordinal(first["planner rank"])
    assert n["ch03-dp-exposed-ms"] == 0.0 and n["ch03-dp32-ms"] < n["ch03-dp-window-ms"]
    assert round(n["ch03-dp-gib"]) == 48 and n["ch03-dp-m"] == 2
    assert f"is {g('dp-rank')} of twelve once {g('dp-sharding')} makes it fit" in FLAT
    # the prose names the reasons of the second and third: they must be these combinations
    ranked = sorted(rows, key=lambda r: r["planner rank"])
    assert [r["dp×tp×pp"] for r in ranked[:3]] == ["32×1×1", "16×2×1", "16×1×2"]
    assert n["ch03-16x1x2-bubble-pct"] == round(100 * bubble_fraction(2, 4), 1) == 20.0
    assert n["ch03-8x1x4-bubble-pct"] == round(100 * bubble_fraction(4, 8), 1) == 27.3
    assert by["8×1×4"]["planner rank"] > by["8×1×4"]["seed rank"] + 3
    assert "**It is nearly right about data parallelism's communication, and blind to its" in FLAT


def test_the_earlier_planner_is_reproduced():
    """The earlier model (one card per rank, no gradients held without a pipeline, ZeRO 0-2, no
    interleaving) gives back its published answers: pure DP tenth, 858 layouts, 316 fit, the
    70 B pick D = 128 × T = 8 with ZeRO-1 at 71.7 GiB."""
    ranks = ch03_earlier.earlier_seed_ranks()
    assert ranks["32×1×1"] == 10 and ranks["16×2×1"] == 1 and ranks["16×1×2"] == 12
    n = computed()
    assert (n["ch03-70b-earlier-count"], n["ch03-70b-earlier-fit"]) == (858, 316)
    assert n["ch03-70b-old"] == "D=128 × T=8 × P=1" and n["ch03-70b-old-sharding"] == "ZeRO-1"
    assert (n["ch03-70b-old-m"], n["ch03-70b-old-gib"]) == (8, 71.7)
    assert n["ch03-dp-rank-earlier"] == "tenth" and n["ch03-16x1x2-earlier"] == "twelfth"


def test_two_errors_note():
    """The note on the two modelling errors teaches them; it tells no history of the book."""
    start = FLAT.index("```{admonition} Two errors a planner can make")
    note = FLAT[start : FLAT.index("```", start + 10)]
    for key in ("dp-rank-earlier", "70b-old", "70b-old-gib", "70b-old-now-gib", "70b-held-gib"):
        assert f"::ch03-{key}:" in note, key
    assert "does not fit" in note and "latency on the critical path" in note
    for word in ("commit", "issue", "CI ", "pull request", "edition", "earlier version"):
        assert word not in note


def test_the_70b_picks_and_their_memory():
    hw = Hardware()
    fits, count = planner.plan(planner.LLAMA2_70B, 1024, 1024)
    n = computed()
    assert (n["ch03-70b-count"], n["ch03-70b-fit"]) == (count, len(fits)) == (1378, 490)
    best = fits[0]
    L = best.layout
    assert (L.dp, L.tp, L.pp, L.zero_stage, L.reshard_after_forward, L.microbatch) == (
        256,
        4,
        1,
        3,
        True,
        1,
    )
    assert best.memory_gib < 80 and n["ch03-70b-first-gib"] == round(best.memory_gib, 1)
    mem = memory_plan.peak(planner.LLAMA2_70B, L, 1024, best.recompute)
    parts = mem["prediction"]["breakdown"]
    assert n["ch03-70b-first-act-gib"] == round(parts["activations"] / GIB, 1)
    assert n["ch03-70b-gather-s"] < n["ch03-70b-fwd-s"]
    assert n["ch03-70b-gather-scatter-s"] < n["ch03-70b-bwd-s"] and best.dp_comm_s == 0.0
    assert n["ch03-70b-first-z1-gib"] > 80 and n["ch03-70b-first-kept-gib"] > 80
    # the old pick: 71.7 GiB without the gradients held across its 8 micro-batches, 87.8 with
    old = plan_layout(planner.LLAMA2_70B, ch03_numbers.OLD_PICK, 1024, hw)
    held = planner.LLAMA2_70B.params / 8 * 2 / GIB
    assert old.microbatches == 8 and old.memory_gib > 80
    assert old.memory_gib == pytest.approx(71.7 + held, abs=0.1) and n["ch03-70b-held-gib"] == 16.1
    assert n["ch03-70b-same-sharding"] == "ZeRO-2" and n["ch03-70b-same-gib"] < 80
    hsdp = [
        p for p in fits if p.layout.sharding.startswith("HSDP")
    ]  # 2Ψ bytes of fp32 states per GPU
    assert not hsdp and n["ch03-70b-hsdp-layouts"] > 0 and n["ch03-70b-hsdp-gib"] > 80
    first_sg = next(i for i, p in enumerate(fits) if p.layout.sp_mode == "split_gather")
    assert n["ch03-70b-sg-rank"] == ch03_strategy.ordinal(first_sg + 1)
    assert f"{g('outside-gib', '.1f')} GiB outside the allocator" in FLAT
    outside = ch03_records.outside_allocator_numbers()
    assert Hardware().overhead_gib >= max(outside.values())
    assert stored()["ch03-outside-gib"] == Hardware().overhead_gib
    assert all(stored()[k] == v for k, v in outside.items())
    assert f"The first is {g('70b-first')} with {g('70b-first-sharding')}" in FLAT


def test_memory_accuracy_claims_state_their_scope():
    """Each claim of how close the memory model came says for which layers it holds."""
    for key in ("val-sg-pct", "val-bound-pct"):
        at = FLAT.index(f"::ch03-{key}:")
        window = FLAT[at : at + 700]
        assert "eager Hugging Face" in window or "Hugging Face's eager" in window, key
        assert "compiled or fused layers keep less" in window, key


def test_exercise_1_all_reduce():
    n = computed()
    nv, ib = comm.NOMINAL_LINKS["nvlink4"], comm.NOMINAL_LINKS["ib_ndr"]
    assert n["ch03-ex1-gib"] == 3.5
    assert n["ch03-ex1-nv-ms"] == round(comm.collective_time("all_reduce", 2 * GIB, 8, nv) * 1e3, 2)
    assert n["ch03-ex1-ib-ms"] == round(comm.collective_time("all_reduce", 2 * GIB, 8, ib) * 1e3, 1)
    one = Hardware().link("all_reduce", 8, 1)  # one member per node: one card
    assert (one.bandwidth_bytes_per_s, one.latency_s) == (ib.bandwidth_bytes_per_s, ib.latency_s)
    assert "with the 8 ranks on 8 nodes, one on each" in FLAT


def test_exercise_2_share():
    share, advice = comm.comm_share(4e-3, 8e-3)
    assert round(share, 2) == 0.33 and advice is None


def test_exercise_3_crossover():
    h, L = 4096, 32
    tokens = 3 * h
    tp = comm.ops_bytes_sent(comm.tp_layer_ops(1, tokens, h) * L, 2)
    dp = comm.bytes_sent("all_reduce", 12 * L * h * h * 2, 2)
    assert tp == pytest.approx(dp) and computed()["ch03-ex3-tokens"] == "12,288"
    assert f"{g('ex3-tokens')} tokens for $h = 4096$" in FLAT


def test_exercise_4_and_5():
    first = planner.seed_report(16, 7.5).splitlines()[1]
    assert first in PAGE and "120.0 GB" in first
    n = computed()
    assert (n["ch03-ex5-m8-pct"], n["ch03-ex5-m32-pct"]) == (27.3, 8.6)


def test_exercise_6_calculator():
    fits, count = planner.plan(
        planner.LLAMA2_70B, 1024, 1024, replace(planner.Hardware(), memory_gib=40.0)
    )
    n = computed()
    assert (n["ch03-ex6-fit"], n["ch03-ex6-count"]) == (len(fits), count) == (182, 1378)
    L = fits[0].layout
    assert (L.dp, L.tp, L.pp, L.sp, L.sp_mode, L.zero_stage, L.microbatch) == (
        8,
        1,
        16,
        8,
        "all_to_all",
        1,
        1,
    )
    assert fits[0].microbatches == n["ch03-ex6-first-m"] == 128
    second = fits[1].layout
    assert (second.dp, second.tp, second.pp, second.sp, second.sp_mode) == (
        8,
        2,
        16,
        4,
        "all_to_all",
    )
    assert n["ch03-ex6-second"] == str(second) and "(Ulysses inside a node)" in FLAT


def test_exercise_9_node_egress():
    """T = 2: 4 members per node, 4 cards; each rank sends half, the node as much as before."""
    n = computed()
    assert (n["ch03-t2-members"], n["ch03-t2-cards"]) == (4, 4)
    assert n["ch03-t2-sent-gb"] == pytest.approx(n["ch03-dp32-sent-gb"] / 2, rel=0.05)
    assert n["ch03-t2-node-gb"] == pytest.approx(n["ch03-dp32-sent-gb"], rel=0.05)
    assert n["ch03-t2-ms"] == pytest.approx(n["ch03-dp32-ms"], rel=0.05)
    assert "9. The guide's 7.5 B model runs on 4 nodes of 8 GPUs with $T = 2$" in FLAT
    assert "- **Exercise 9.** " + g("t2-members", "d") in FLAT


def test_exercise_10_held_gradients():
    assert "10. The pick of the planner with the two errors for Llama-2-70B" in FLAT
    answer = FLAT[FLAT.index("- **Exercise 10.**") :]
    assert "::ch03-70b-held-gib:" in answer and "::ch03-70b-same-sharding:" in answer


def _recorded(name):
    from helpers.record.results import load

    try:
        return load(name)
    except FileNotFoundError:
        pytest.skip(f"no recorded {name}")


def test_collective_claims_match_the_record():
    from helpers.cost import calibration as ch03_calibration

    rows = ch03_calibration.measured_collectives(_recorded("ch03_collectives")["runs"])
    table, link = ch03_calibration.collective_table(rows)
    held = [r for r in table if r["size_bytes"] >= 2**20 and r["role"] == "held out"]
    assert len(held) == 22 and all(abs(r["error %"]) <= 25 for r in held)
    worst = ch03_calibration.worst_error(table)
    assert (worst["collective"], worst["size"]) == ("all_reduce", "1M")  # the page names it
    assert "**The worst is the all-reduce at 1 MiB," in FLAT
    big = ch03_calibration.worst_error(table, 16 * 2**20)
    assert (big["collective"], big["size"]) == ("reduce_scatter", "64M")
    naive, _ = ch03_calibration.collective_table(rows, "alpha_beta")
    w = ch03_calibration.worst_error(naive)
    assert (w["collective"], w["size"]) == ("all_to_all", "1M") and "off by a third" in FLAT
    fresh = ch03_records.collective_numbers(rows)
    assert all(stored()[k] == v for k, v in fresh.items())  # the stored glue is this record's


def test_share_claims_match_the_record():
    from helpers.cost import calibration as ch03_calibration

    results = _recorded("ch03_share")["runs"][0]["results"]
    res = {(r["layout"], r["global_batch"]): r for r in results}
    for b in (2, 8, 32):  # "Lower TP": the share falls at every batch
        assert res[("dp", b)]["share"] < res[("tp", b)]["share"]
    assert res[("ddp", 32)]["share"] > res[("dp", 32)]["share"]  # overlap did not pay here
    assert max(r["share"] for r in results) < 0.5
    coll = ch03_calibration.measured_collectives(_recorded("ch03_collectives")["runs"])
    _, link = ch03_calibration.collective_table(coll)
    floors = ch03_calibration.host_floors(coll)
    dp32 = res[("dp", 32)]
    ar = ch03_calibration.predict("all_reduce", dp32["comm_bytes"], 2, link, "host_floor", floors)
    fresh = ch03_records.share_numbers(results, ar)
    assert all(stored()[k] == v for k, v in fresh.items())
    assert f"({g('share-tp-2', '.2f')} → {g('share-dp-2', '.2f')}," in FLAT


def test_validation_claims_match_the_record():
    from helpers.cost import calibration as ch03_calibration
    from helpers.record import ch03_validation

    coll = ch03_calibration.measured_collectives(_recorded("ch03_collectives")["runs"])
    _, link = ch03_calibration.collective_table(coll)
    hw = replace(planner.Hardware(), memory_gib=141.0, flash=False, intra=link, overhead_gib=0.0)
    rows = ch03_validation.validation_rows(_recorded("ch03_layouts")["runs"], hw)
    errors = {
        r["layout"]: 100 * (r["planner GiB"] - r["measured GiB"]) / r["measured GiB"] for r in rows
    }
    worst = max(errors, key=lambda k: abs(errors[k]))
    assert worst == "sp=2 all_to_all"  # the page names it
    # the stored glue is this record's
    val = ch03_numbers.validation_numbers(rows)
    for key, value in val.items():
        assert stored()[key] == value, key
    assert f"within {g('val-bound-pct', '.0f')} % on all eight layouts" in FLAT
    assert f"is Ulysses, {g('val-worst-pct', '+.1f')} %" in FLAT
    assert len(rows) == 8 and all("measured rank" in r for r in rows)
    top5 = sorted(rows, key=lambda r: r["measured rank"])[:5]
    assert all(r["planner rank"] == r["measured rank"] for r in top5)
    slowest = max(rows, key=lambda r: r["measured ms"])
    assert slowest["layout"] == "pp=2, m=8"  # "is measured slowest"
    assert stored()["ch03-val-spearman"] == round(ch03_validation.rank_agreement(rows), 2)


def test_the_flowchart_is_the_planner_s_rules():
    """Every rule box is a rule object of the planner, in its order, and the boxes account for every
    candidate the planner drops (a small case, to stay fast)."""
    from helpers.figures import layout_flowchart
    from helpers.parallel.layout_rules import LAYOUT_RULES

    f = layout_flowchart.flow(planner.VALIDATION_0B5, 8, 16)
    rules = [s.label for s in f.stages if s.kind == "rule"]
    names = [r.name for r in LAYOUT_RULES]
    assert rules[: len(names)] == names
    assert rules[len(names) + 1 : -1] == [r.name for r in planner.GEMINI_RULES]
    assert f.valid == f.planner_count and f.fit == len(f.planner_fits)
    assert sum(s.dropped for s in f.stages if s.kind == "rule") == f.enumerated - f.fit
