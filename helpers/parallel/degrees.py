"""The degrees of a layout, one type (Chapter 2, "Where sequence parallelism fits"): data D, tensor
T, pipeline P, sequence S and its mode, expert E.

In the spirit of torchtitan's ``ParallelDims``: a frozen :class:`Degrees` checked once, built from a
world size by :meth:`Degrees.from_world` (the data degree D = G / (T·P·S) of :func:`data_degree`),
and the one place that knows how the degrees multiply into the world (an own sequence axis counts
in G; split_gather and ring reuse the tensor group), how a demo's command line spells them
(:meth:`Degrees.flags`, ``--tp 2``) and what Colossal-AI's ``HybridParallelPlugin`` calls them
(:meth:`Degrees.colossalai`, ``tp_size``), through one rename table, :data:`NAMES`. A config file
(:attr:`helpers.config.schema.TrainConfig.degrees`), a planner's layout
(:attr:`helpers.parallel.layouts.Layout.degrees`), Chapter 7's layouts and the rank grid
(:meth:`helpers.parallel.mesh.RankMesh.of`) give or take one.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.parallel.factors import divisors
from helpers.parallel.vocab import AXIS_WORDS, OWN_AXIS_SP_MODES, SHARED_SP_MODES, SP_MODES

# the book's word -> (the demos' flag, HybridParallelPlugin's argument); the data degree is what the
# others leave (Colossal-AI derives it), the expert degree MoeHybridParallelPlugin's
NAMES = {
    "data": ("dp", None),
    "tensor": ("tp", "tp_size"),
    "pipeline": ("pp", "pp_size"),
    "sequence": ("sp", "sp_size"),
    "sequence_mode": ("sp_mode", "sequence_parallelism_mode"),
    "expert": ("ep", "ep_size"),
}
COLOSSALAI = {word: arg for word, (_, arg) in NAMES.items() if arg}  # tensor -> tp_size, ...


def _suggest(world: int, sizes: dict[str, int]) -> str:
    """'try tensor 2 or 4, or pipeline 1': nearest sizes of one axis that divide with the others
    fixed."""
    tips = []
    for axis, value in sizes.items():
        others = 1
        for a, v in sizes.items():
            others *= v if a != axis else 1
        if world % others:
            continue
        fits = divisors(world // others)
        near = [
            max((d for d in fits if d < value), default=None),
            min((d for d in fits if d > value), default=None),
        ]
        near = [str(d) for d in near if d is not None]
        if near:
            tips.append(f"{AXIS_WORDS[axis]} {' or '.join(near)}")
    return "; try " + ", or ".join(tips) if tips else ""


def data_degree(G: int, tp: int, pp: int, sp: int = 1, sp_mode: str | None = None) -> int:
    """The data-parallel degree D = G / (T·P·S) of the seed's G = D × T × P, or a ValueError.

    ``sp`` counts in G only for the modes with an own axis (all_to_all, ring_attn), as in
    HybridParallelPlugin. Unlike the plugin, which floors ``G // (sp·pp·tp)``, a remainder is
    refused here with the numbers and the nearest sizes that would fit.

    >>> data_degree(64, tp=4, pp=2)
    8
    """
    for name, value in (("G", G), ("tp", tp), ("pp", pp), ("sp", sp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if sp_mode is None and sp != 1:
        raise ValueError(
            f"sp={sp} needs a sequence parallelism mode: {' or '.join(OWN_AXIS_SP_MODES)} "
            f"give it an own axis, {' or '.join(SHARED_SP_MODES)} reuse the tensor group "
            "(HybridParallelPlugin: 'You should not set "
            "sp_size when sequence parallelism is not enabled')"
        )
    if sp_mode is not None and sp_mode not in SP_MODES:
        raise ValueError(
            f"unknown sequence parallelism mode {sp_mode!r}; Colossal-AI knows {list(SP_MODES)}"
        )
    if sp_mode in SHARED_SP_MODES:
        if tp < 2:
            raise ValueError(
                f"{sp_mode} sequence parallelism splits the sequence over the tensor group: "
                "it needs tp > 1"
            )
        if sp not in (1, tp):
            raise ValueError(
                f"{sp_mode} reuses the tensor group, so S = T = {tp}; sp={sp} would be ignored"
            )
        sp = 1  # no axis of its own: S does not count in G
    sizes = {"tp": tp, "pp": pp} | ({"sp": sp} if sp > 1 else {})
    model = tp * pp * sp
    if G % model:
        split = " × ".join(f"{AXIS_WORDS[a]}={v}" for a, v in sizes.items())
        raise ValueError(
            f"{G} GPUs cannot be split as {split}: {model} does not divide {G}{_suggest(G, sizes)}"
        )
    return G // model


@dataclass(frozen=True)
class Degrees:
    """D, T, P, S (with its mode) and E of one layout. ``sequence`` is S as the book counts it:
    the own axis of all_to_all and ring_attn, or T for split_gather and ring (which reuse the
    tensor group and may leave it 1); ``expert`` splits the experts inside the data group."""

    data: int | None = 1  # None: what the world leaves, not known yet (like torchtitan's -1)
    tensor: int = 1
    pipeline: int = 1
    sequence: int = 1
    sequence_mode: str | None = None
    expert: int = 1

    def __post_init__(self) -> None:
        for word in ("data", "tensor", "pipeline", "sequence", "expert"):
            value = getattr(self, word)
            if word == "data" and value is None:
                continue  # what the world leaves, once it is known (a config's data: auto)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"the {word} degree must be a positive integer, got {value!r}")
        model = self.model_parallel * (self.data or 1)
        data_degree(model, self.tensor, self.pipeline, self.sequence, self.sequence_mode)
        if self.data is not None and self.data % self.expert:
            raise ValueError(
                f"expert = {self.expert} must divide data = {self.data} (experts are split inside "
                "the data group: 'dp_size should be divisible by ep_size')"
            )

    @classmethod
    def from_world(
        cls,
        world: int,
        tensor: int = 1,
        pipeline: int = 1,
        sequence: int = 1,
        sequence_mode: str | None = None,
        expert: int = 1,
    ) -> "Degrees":
        """The layout of ``world`` ranks with these degrees: D = G / (T·P·S)
        (:func:`data_degree`)."""
        data = data_degree(world, tensor, pipeline, sequence, sequence_mode)
        return cls(data, tensor, pipeline, sequence, sequence_mode, expert)

    @property
    def own_sequence(self) -> int:
        """The size of the sequence's own axis: S for all_to_all and ring_attn, else 1."""
        return self.sequence if self.sequence_mode in OWN_AXIS_SP_MODES else 1

    @property
    def world(self) -> int | None:
        """G = D·T·P·S, S counted only with an own axis (None while D is not known)."""
        return None if self.data is None else self.data * self.model_parallel

    @property
    def model_parallel(self) -> int:
        """T·P·S: the ranks one replica of the model spans."""
        return self.tensor * self.pipeline * self.own_sequence

    def flags(self, *always: str) -> list[str]:
        """The demos' command-line flags for these degrees (``--tp 2 --pp 2``), in the order of
        :data:`NAMES`; a degree of 1 (no mode) is left out unless named in ``always``."""
        out = []
        for word, (flag, _) in NAMES.items():
            value = getattr(self, word)
            if word == "data" or (value in (1, None) and word not in always):
                continue
            if word == "sequence" and self.sequence_mode in SHARED_SP_MODES and word not in always:
                continue  # split_gather and ring take T: no --sp of their own
            out += [f"--{flag}", str(value)]
        return out

    def colossalai(self) -> dict:
        """HybridParallelPlugin's arguments for these degrees (``tp_size``, ``pp_size`` and, with a
        mode, ``enable_sequence_parallelism``, ``sequence_parallelism_mode`` and, for an own axis,
        ``sp_size``; MoeHybridParallelPlugin's ``ep_size`` when E > 1)."""
        kw: dict = {COLOSSALAI["tensor"]: self.tensor, COLOSSALAI["pipeline"]: self.pipeline}
        if self.sequence_mode:
            kw["enable_sequence_parallelism"] = True
            kw[COLOSSALAI["sequence_mode"]] = self.sequence_mode
            if self.own_sequence > 1:
                kw[COLOSSALAI["sequence"]] = self.sequence
        if self.expert > 1:
            kw[COLOSSALAI["expert"]] = self.expert
        return kw


def degree_flags(*always: str, **degrees) -> list[str]:
    """A demo's flags for these degrees (``degree_flags(tensor=2)`` is ``["--tp", "2"]``), the
    data degree left to the world: what a recorder's run list holds instead of typed flags."""
    return Degrees(None, **degrees).flags(*always)
