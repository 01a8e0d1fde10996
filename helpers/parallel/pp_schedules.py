"""Pipeline schedules as ordered per-stage action lists, their dependency simulator and bubbles.

Chapter 1, "Pipeline schedules". A schedule is, for each of the P stages, the list of actions the
stage runs in order. An :class:`Action` is a forward ``F``, a whole backward ``BW``, or, in the
zero-bubble schedule, the backward split in two: ``B`` (the gradient of the stage's input, which
the previous stage waits for) and ``W`` (the gradient of the stage's weights, which nobody waits
for). Each action names its micro-batch and its model chunk; chunk ``c`` of stage ``s`` is the
virtual stage ``c·P + s`` (the interleaved placement of Narayanan et al. 2021, §2.2).

- GPipe (Huang et al. 2019, Fig. 2c): all m forwards, then all m backwards.
- 1F1B (Narayanan et al. 2021, §2.1, Fig. 4 top): P - 1 - s warm-up forwards, then one forward
  and one backward in turn, then the remaining backwards.
- Interleaved 1F1B (same paper, Fig. 4 bottom): v chunks per stage, micro-batches in groups of P
  per chunk, warm-up 2(P - 1 - s) + (v - 1)P forwards (Megatron-LM's ordering).
- ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §3.1, Fig. 3): F and B as in
  1F1B, each W moved later to fill what would be idle; no more micro-batches in flight than
  1F1B.

:func:`simulate` runs a schedule with given costs and no noise: it finds the earliest start of
every action from its dependencies, raises on a deadlock, and gives the timeline whose idle share
the formulas (:func:`bubble_formula`) predict.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from helpers.parallel.pp import BUBBLE_FORMULAS, bubble_fraction, gpipe_order

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")  # built here from their papers
V_SHAPED = ("zbv",)  # Colossal-AI's ZB-V order (:func:`zbv`), two chunks in a V
KIND_NAMES = {"F": "forward", "BW": "backward", "B": "backward-input", "W": "backward-weight"}


@dataclass(frozen=True)
class Action:
    """One unit of work on a stage: ``kind`` in F, BW, B, W; micro-batch ``mb``; ``chunk``."""

    kind: str
    mb: int
    chunk: int = 0

    def label(self) -> str:
        return f"{self.kind}{self.mb}" + (f".{self.chunk}" if self.chunk else "")


def virtual_stage(stage: int, chunk: int, stages: int, v_shape: bool = False) -> int:
    """The virtual stage that chunk ``c`` of stage ``s`` holds: c·P + s when interleaved; in the
    V shape of Qi et al.'s ZB-V, chunk 0 holds s and chunk 1 holds 2P - 1 - s."""
    if v_shape:
        return stage if chunk == 0 else 2 * stages - 1 - stage
    return chunk * stages + stage


def stage_of(k: int, stages: int, v_shape: bool = False) -> int:
    """The stage that holds virtual stage ``k`` (the inverse of :func:`virtual_stage`)."""
    if v_shape:
        return k if k < stages else 2 * stages - 1 - k
    return k % stages


def gpipe(p: int, m: int) -> list[list[Action]]:
    """All forwards, then all backwards (last micro-batch first), on every stage
    (:func:`helpers.parallel.pp.gpipe_order`, a backward here a whole BW)."""
    order = [Action("F" if s[0] == "F" else "BW", int(s[1:])) for s in gpipe_order(m)]
    return [list(order) for _ in range(p)]


# [start: 1f1b]
def one_f_one_b(p: int, m: int) -> list[list[Action]]:
    """1F1B: stage s warms up with min(P-1-s, m) forwards, then alternates F and BW."""
    out = []
    for s in range(p):
        warm = min(p - 1 - s, m)
        acts = [Action("F", i) for i in range(warm)]
        for i in range(m - warm):
            acts += [Action("F", warm + i), Action("BW", i)]
        acts += [Action("BW", i) for i in range(m - warm, m)]
        out.append(acts)
    return out
    # [end: 1f1b]


def _interleaved_ids(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, chunk) of the k-th forward or backward of a stage (groups of P per chunk)."""
    group, within = divmod(k, p * v)
    chunk = (k // p) % v
    return group * p + within % p, chunk if forward else v - 1 - chunk


def interleaved(p: int, m: int, v: int) -> list[list[Action]]:
    """Interleaved 1F1B with ``v`` chunks per stage; needs m divisible by P."""
    if m % p:
        raise ValueError(f"interleaved 1F1B needs m divisible by P, got m={m}, P={p}")
    total = m * v
    out = []
    for s in range(p):
        warm = min(2 * (p - 1 - s) + (v - 1) * p, total)

        def f(k: int) -> Action:
            return Action("F", *_interleaved_ids(k, p, v, True))

        def b(k: int) -> Action:
            return Action("BW", *_interleaved_ids(k, p, v, False))

        acts = [f(k) for k in range(warm)]
        for k in range(total - warm):
            acts += [f(warm + k), b(k)]
        acts += [b(k) for k in range(total - warm, total)]
        out.append(acts)
    return out


# [start: zb-h1]
def zb_h1(p: int, m: int) -> list[list[Action]]:
    """ZB-H1 for equal costs of F, B and W, found by list scheduling in unit time slots.

    In every slot each stage runs, in this order of preference: a W when more than P-1 of its
    Ws wait (so at most P input/gradient stashes are kept); a B whose gradient has arrived (B is
    on the critical path); an F whose input has arrived while fewer than P-s micro-batches are
    in flight (1F1B's activation bound); a waiting W (filling a slot that would be idle). The
    resulting orders idle (P-1)/(3m+P-1) of the step for m >= P, the bound of Qi et al. §3.1.
    """
    order: list[list[Action]] = [[] for _ in range(p)]
    n_f, n_b, waiting = [0] * p, [0] * p, [[] for _ in range(p)]
    ready: dict[tuple[str, int, int], int] = {}  # (F|B, mb, stage) -> slot it is available
    slot = 0
    while any(len(o) < 3 * m for o in order):
        finished = {}
        for s in range(p):
            i, nxt = n_b[s], ("F", n_b[s], s) if s == p - 1 else ("B", n_b[s], s + 1)
            if len(waiting[s]) > p - 1:
                a = waiting[s].pop(0)
            elif i < n_f[s] and ready.get(nxt, slot + 1) <= slot:
                a, n_b[s] = Action("B", i), i + 1
                waiting[s].append(Action("W", i))
            elif (
                n_f[s] < m
                and n_f[s] - n_b[s] < p - s
                and (s == 0 or ready.get(("F", n_f[s], s - 1), slot + 1) <= slot)
            ):
                a, n_f[s] = Action("F", n_f[s]), n_f[s] + 1
            elif waiting[s]:
                a = waiting[s].pop(0)
            else:
                continue
            if a.kind != "W":
                finished[(a.kind, a.mb, s)] = slot + 1
            order[s].append(a)
        ready |= finished
        slot += 1
    return order
    # [end: zb-h1]


def zbv(p: int, m: int) -> list[list[Action]]:
    """Colossal-AI 0.5.0's ZB-V order for P stages and m micro-batches with equal costs: the
    F, B and W nodes of ``PipelineGraph.get_v_schedule()`` (the ``scheduler_nodes`` that
    ``HybridParallelPlugin(pp_style="zbv")`` takes; ``colossalai/pipeline/schedule/v_schedule.py``),
    in their order on each stage. Chunks sit in a V (:func:`virtual_stage` with ``v_shape``).

    ``v_schedule.py`` imports nothing from Colossal-AI, so it is loaded as a file of its own: a
    rank then skips the package's import (about 7 s of CPU here)."""
    origin = importlib.util.find_spec("colossalai").submodule_search_locations[0]
    path = Path(origin) / "pipeline" / "schedule" / "v_schedule.py"
    spec = importlib.util.spec_from_file_location("colossalai_v_schedule", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    graph = module.PipelineGraph(
        n_stage=p, n_micro=m, f_cost=1, b_cost=1, w_cost=1, c_cost=0, f_mem=1, b_mem=-1, w_mem=0
    )
    nodes = graph.get_v_schedule()
    return [[Action(n.type, n.minibatch, n.chunk) for n in row if n.type in "FBW"] for row in nodes]


def build(name: str, p: int, m: int, v: int = 2) -> list[list[Action]]:
    """The schedule called ``name`` (:data:`SCHEDULES` or :data:`V_SHAPED`) for P stages and m
    micro-batches (v chunks per stage for the interleaved one; ZB-V always has 2)."""
    if p < 2 or m < 1:
        raise ValueError(f"a pipeline needs P >= 2 stages and m >= 1 micro-batches, got {p}, {m}")
    makers = {
        "gpipe": lambda: gpipe(p, m),
        "1f1b": lambda: one_f_one_b(p, m),
        "interleaved": lambda: interleaved(p, m, v),
        "zb-h1": lambda: zb_h1(p, m),
        "zbv": lambda: zbv(p, m),
    }
    if name not in makers:
        raise ValueError(f"unknown schedule {name!r}; known: {', '.join(makers)}")
    return makers[name]()


def chunks_of(schedule: list[list[Action]]) -> int:
    """How many model chunks each stage holds in ``schedule``."""
    return 1 + max(a.chunk for acts in schedule for a in acts)


def bubble_formula(
    name: str, p: int, m: int, v: int = 2, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0
) -> float:
    """Idle share of each stage's step under schedule ``name`` (v model chunks per stage for the
    interleaved one), for per-micro-batch costs t_f, t_b and t_w of a whole stage:
    :func:`helpers.parallel.pp.bubble_fraction`, the one formula."""
    if name not in BUBBLE_FORMULAS:
        raise ValueError(f"unknown schedule {name!r}; known: {', '.join(SCHEDULES)}")
    return bubble_fraction(p, m, v if name == "interleaved" else 1, name, t_f, t_b, t_w)


def simulate(
    schedule: list[list[Action]],
    t_f: float = 1.0,
    t_b: float = 1.0,
    t_w: float = 1.0,
    t_comm: float = 0.0,
    v_shape: bool = False,
) -> list[list[tuple[float, float, Action]]]:
    """Each stage's (start, end, action) when every action starts as soon as its stage is free
    and its input is there. Costs are per micro-batch for a whole stage; a chunk's action costs
    1/v of it. An F needs the same micro-batch's F on the previous virtual stage, a B or BW the
    next virtual stage's B or BW (the last virtual stage: its own F), a W its own B."""
    p, v = len(schedule), chunks_of(schedule)
    last = p * v - 1
    cost = {"F": t_f / v, "B": t_b / v, "W": t_w / v, "BW": (t_b + t_w) / v}
    done: dict[tuple[str, int, int], float] = {}  # (F|B, mb, virtual stage) -> end time
    free, pos = [0.0] * p, [0] * p
    out: list[list[tuple[float, float, Action]]] = [[] for _ in range(p)]
    while any(pos[s] < len(schedule[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while pos[s] < len(schedule[s]):
                a = schedule[s][pos[s]]
                k = virtual_stage(s, a.chunk, p, v_shape)
                if a.kind == "F":
                    need = ("F", a.mb, k - 1) if k > 0 else None
                elif a.kind in ("B", "BW"):
                    need = ("B", a.mb, k + 1) if k < last else ("F", a.mb, k)
                else:  # W after its own B, on this stage
                    need = ("B", a.mb, k)
                if need is not None and need not in done:
                    break
                ready = 0.0 if need is None else done[need]
                if need is not None and stage_of(need[2], p, v_shape) != s:
                    ready += t_comm
                start = max(free[s], ready)
                end = start + cost[a.kind]
                out[s].append((start, end, a))
                free[s] = end
                if a.kind != "W":
                    done[("F" if a.kind == "F" else "B", a.mb, k)] = end
                pos[s] += 1
                moved = True
        if not moved:
            stuck = {s: schedule[s][pos[s]].label() for s in range(p) if pos[s] < len(schedule[s])}
            raise RuntimeError(f"the schedule deadlocks: stages wait at {stuck}")
    return out


def with_imbalance(bubble: float, busy: list[float]) -> float:
    """The idle share when the stages' work differs: stage s is busy ``busy[s]`` in a step.

    The slowest stage sets the pace. If it idles the balanced share ``bubble``, the step lasts
    max(busy)/(1 - bubble), and the stages idle on average 1 - mean(busy)/max(busy)·(1 - bubble).
    Equal work gives back ``bubble``.
    """
    return 1.0 - sum(busy) / len(busy) / max(busy) * (1.0 - bubble)


def idle_share(timeline: list[list[tuple[float, float, object]]]) -> float:
    """Mean over stages of the idle share of the common window [first start, last end]."""
    start = min(iv[0] for row in timeline for iv in row)
    end = max(iv[1] for row in timeline for iv in row)
    busy = [sum(e - s for s, e, _ in row) for row in timeline]
    return 1.0 - sum(busy) / (len(timeline) * (end - start))


def in_flight(schedule: list[list[Action]]) -> list[int]:
    """Per stage, the most micro-batch chunks whose forward ran and whose input-gradient (B or
    BW) has not: the activations a stage must keep."""
    peaks = []
    for acts in schedule:
        now = peak = 0
        for a in acts:
            now += a.kind == "F"
            now -= a.kind in ("B", "BW")
            peak = max(peak, now)
        peaks.append(peak)
    return peaks
