"""One model shape for the whole book: a GPT-style or Llama-style decoder as plain numbers.

Chapter 2 checks layouts against it (heads, KV heads and layers divisible by T, S and P),
Chapter 3's planner counts its parameters and FLOPs, Chapter 7's memory models count its tensors,
and the Llama demos build a ``transformers`` config from it (:meth:`ModelShape.config`). The two
styles differ in the MLP, the norms, the biases and the embeddings:

* Llama (Touvron et al. 2023, "LLaMA", §2): a SwiGLU MLP of three h × f matrices with f about
  8h/3, RMSNorm (one h-vector), rotary positions (no parameters), no biases, an output head
  untied from the embedding (``transformers``' ``LlamaForCausalLM``);
* GPT-2 (Radford et al. 2019): a GELU MLP of two matrices with f = 4h, LayerNorm (weight and
  bias), a bias on every linear layer, a learned s × h position table, the head tied to the token
  embedding (``transformers``' ``GPT2LMHeadModel``).

:attr:`ModelShape.params` counts the matrices and embeddings only, the count of Chapter 3's planner
and of Chapter 7's "4Lh² + 3·L·h·f + 2vh"; :attr:`ModelShape.exact_params` adds the norms and
biases, what ``sum(p.numel() for p in model.parameters())`` reports.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

MLPS = ("swiglu", "gelu")  # three matrices (gate, up, down) or two (up, down)
POSITIONS = ("rotary", "learned")  # no parameters, or an s × h table


def llama_ffn(hidden: int) -> int:
    """SwiGLU width as ``helpers.models.llama.llama_config`` builds it: 8h/3 rounded up to 64."""
    return (8 * hidden // 3 + 63) // 64 * 64


@dataclass(frozen=True, repr=False)
class ModelShape:
    """The numbers of a decoder-only transformer that layouts, planner and memory models need.

    Only ``layers`` and ``heads`` are required: the layout rules of Chapter 2 need no more. Build
    complete shapes with :meth:`llama` (f = 8h/3 rounded up to 64 unless given) or :meth:`gpt`
    (f = 4h); a real checkpoint's width is passed as ``ffn`` (Llama-2-7B's is 11008, not 10944).
    """

    layers: int
    heads: int
    kv_heads: int | None = None  # None: as many as heads (multi-head attention)
    hidden: int | None = None
    seq_len: int | None = None
    vocab: int | None = None
    ffn: int | None = None  # the MLP's inner width f
    mlp: str = "swiglu"
    positions: str = "rotary"
    tied: bool = False  # output head shares the token embedding
    biases: bool = False  # GPT-2: every linear layer and norm has a bias
    name: str = ""

    def __post_init__(self) -> None:
        if self.mlp not in MLPS:
            raise ValueError(f"mlp must be one of {MLPS}, got {self.mlp!r}")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")

    @classmethod
    def llama(
        cls,
        layers: int,
        hidden: int,
        heads: int,
        kv_heads: int | None = None,
        vocab: int = 32000,
        ffn: int | None = None,
        **more,
    ) -> ModelShape:
        """A Llama-style shape: SwiGLU of width ``ffn`` (default 8h/3 rounded up to 64), RMSNorm,
        rotary positions, untied head; ``more`` sets the other fields (``seq_len``, ``name``)."""
        kv = heads if kv_heads is None else kv_heads
        width = llama_ffn(hidden) if ffn is None else ffn
        return cls(layers, heads, kv, hidden, vocab=vocab, ffn=width, **more)

    @classmethod
    def gpt(
        cls,
        layers: int,
        hidden: int,
        heads: int,
        vocab: int = 50257,
        seq_len: int = 1024,
        ffn: int | None = None,
        **more,
    ) -> ModelShape:
        """A GPT-2-style shape: GELU MLP of width ``ffn`` (default 4h), LayerNorm, biases, learned
        positions for ``seq_len`` tokens, the head tied to the embedding."""
        width = 4 * hidden if ffn is None else ffn
        style = dict(mlp="gelu", positions="learned", tied=True, biases=True)
        return cls(layers, heads, heads, hidden, seq_len, vocab, width, **style, **more)

    @property
    def kv(self) -> int:
        """Key-value heads (as many as query heads without grouped-query attention)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def kv_width(self) -> int:
        """Output width of the k and v projections: h · kv_heads / heads."""
        return self._need("hidden") * self.kv // self.heads

    def _need(self, *names: str) -> int:
        for name in names:
            if getattr(self, name) is None:
                raise ValueError(f"{self!r} has no {name}: build it with ModelShape.llama or .gpt")
        return getattr(self, names[0])

    @property
    def layer_matrices(self) -> int:
        """Weight-matrix parameters of one layer: q, o (h² each), k, v (h · kv_width each) and the
        MLP's three (SwiGLU) or two (GELU) h × f matrices."""
        h, f = self._need("hidden", "ffn"), self.ffn
        return 2 * h * h + 2 * h * self.kv_width + (3 if self.mlp == "swiglu" else 2) * h * f

    @property
    def layer_norms_and_biases(self) -> int:
        """The rest of one layer: two norms (h each, 2h with LayerNorm's bias) and the biases of
        q, k, v, o and the MLP when ``biases``."""
        h, f = self._need("hidden", "ffn"), self.ffn
        if not self.biases:
            return 2 * h
        mlp = (2 if self.mlp == "swiglu" else 1) * f + h
        return 4 * h + (h + 2 * self.kv_width) + h + mlp

    @property
    def embedding_params(self) -> int:
        """Token embedding, learned positions, and the output head unless it is tied."""
        h, v = self._need("hidden", "vocab"), self.vocab
        positions = self._need("seq_len") * h if self.positions == "learned" else 0
        return v * h * (1 if self.tied else 2) + positions

    @property
    def params(self) -> int:
        """Matrices and embeddings, norms and biases left out (Chapter 3's planner, Chapter 7's
        4Lh² attention for MHA, 3·L·h·f SwiGLU, 2vh untied embedding and head)."""
        return self._need("layers") * self.layer_matrices + self.embedding_params

    @property
    def exact_params(self) -> int:
        """Every parameter, as ``sum(p.numel() for p in model.parameters())`` counts them."""
        final_norm = self.hidden * (2 if self.biases else 1)
        return self.params + self.layers * self.layer_norms_and_biases + final_norm

    def config(self, attn: str = "sdpa", max_seq: int = 4096):
        """A ``transformers.LlamaConfig`` of this shape (``helpers.models.llama.llama_config``,
        its SwiGLU width replaced by ``ffn``)."""
        if (self.mlp, self.positions, self.tied, self.biases) != ("swiglu", "rotary", False, False):
            raise ValueError(f"{self!r} is not Llama-style: config() builds Llama models only")
        from helpers.models.llama import llama_config  # torch, transformers: only when called

        config = llama_config(
            layers=self.layers,
            hidden=self._need("hidden", "vocab", "ffn"),
            heads=self.heads,
            kv_heads=self.kv,
            vocab=self.vocab,
            max_seq=max_seq,
            attn=attn,
        )
        config.intermediate_size = self.ffn
        return config

    def __repr__(self) -> str:
        """The fields that differ from their defaults, in order."""
        shown = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if getattr(self, f.name) != f.default
        ]
        return f"ModelShape({', '.join(shown)})"
