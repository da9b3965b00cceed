"""Why this weight? (the ``why`` command, and Explore's "Why this weight?"): QK attribution, why a head puts its
weight where it does. One pre-softmax score s_ij of layer L, head h (query token i, key token j) split exactly into
what wrote the query and what wrote the key.

The layer's input x is a sum of parts: the embeddings (the token's, and the position's and token type's where
the family adds them), every earlier head's output z_h·W_O[h], every earlier MLP's output and the biases. The
norm before the attention (LayerNorm, RMSNorm; BERT's norms along the stream; Qwen3's QK-norm of each head's q
and k, at the rms of the pass's own q and k; OLMo 2's QK-norm over the whole q and k, and its norm after each
attention's W_O, at the rms of that attention's own output) is made linear by freezing its scale at its value in
this pass, as the direct logit attribution does; LayerNorm's mean-centring is linear already, so each part is centred
on its own and no cross term is left over. q and k are then linear in the
parts, plus a constant (the norm's bias and the projections' biases): q_i = Σ_a q_i(a) + q_i(bias),
k_j = Σ_b k_j(b) + k_j(bias), and rotary families turn each part by its position (a rotation is linear too).
So

    s_ij = scale · q_i·k_j = Σ_a Σ_b scale · q_i(a)·k_j(b)

a matrix of query part × key part terms whose sum is the model's own score (up to rounding: the split runs in
float64; tests hold it to 1e-4 of the score's scale for a float32 model and 1e-9 for a float64 one). The
softmax that turns scores into weights is not linear and is not split: a part with a large term raises the
score of this key against the others of the row. A soft-capped layer (Gemma 2's ``attn_logit_softcapping``) turns
each score into cap·tanh(s / cap) before the softmax, which is not linear either: the split is of the pre-cap score
s (the parts sum to scale·q·k), and the cap is applied after, to the whole (``softcap``; ``weight`` is the softmax
of the capped row).

**Position.** A family with a learned position table (GPT-2, BERT) has position as a part of its own ("position
embedding"): its terms, with any part on either side, are the score's position reading, the rest its content. A
rotary family (its record's ``positions == "rotary"``: Llama and the decoders like it, ModernBERT) has no such part:
every part is turned by its position. There the score is split by rotary frequency band instead. With q and k the
head's vectors before the turn and pair b = (b, b + d/2) (Hugging Face's "rotate half" layout) turned by the angle
θ_b·position, θ_b = base^(−2b/d),

    s_ij = scale · Σ_b q_i,b · R(θ_b·(j − i)) · k_j,b        (each pair's 2-vector dot product)

exactly: band b's term is the dot product of pair b of the pass's own turned q and k. Its *content* is the same
term with no turn between them (offset 0), scale · q_i,b·k_j,b, and its *position* the difference, what turning
by the real offset i − j adds. Bands are grouped by how far they turn across the text (``span`` = n − 1 tokens,
the farthest two of its n tokens are apart): *high-frequency* bands turn a full circle or more (wavelength
2π/θ_b ≤ span: they tell nearby offsets apart and repeat: local position), *low-frequency* bands turn less than
:data:`NEARLY_STILL` radians (6°) across the whole text (their term can change with position by at most a tenth
of |q_b|·|k_b|: nearly position-free), the *middle* bands between them; dimensions that are never turned (θ = 0,
partial rotary) are their own group.

**Numbers, not words.** This module returns numbers and readings made of them (:class:`PositionReading`,
:class:`BandGroup`, :class:`Bucket`, :class:`GridReading`); the sentences a person reads ("raises the score by
1.47 (+30% of 4.83)") are made from those by :mod:`probes.explain.why`, for the CLI and the app alike. A share of
the score is given only when the score is positive (a share of a negative score would flip the term's sign):
``frame()``'s ``share`` (and the CSV's) is blank (NaN) then.
"""

from __future__ import annotations

import importlib
import math
import threading
import warnings
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..attention_math import allowed_keys, soft_cap
from ..errors import BadOption, UnsupportedModel
from ..head_index import check_index, check_layer_head, check_receiver, check_seen_key
from ..models import Encoding
from ..scratch import RotaryNetwork, SplitNetwork, build, point, run_with_hooks
from ..seam import reader

BIAS_QK = "q/k biases"  # the constant part of q and k: the norm's bias and the projections' biases
POSITION_PARTS = ("position embedding",)  # the parts that are position itself (families with a learned table)
NEARLY_STILL = 0.1  # radians: a band turning less than this across the whole text is nearly position-free
LAYER_BANDS = 4  # heads and MLPs are bucketed in about this many bands of layers (ceil(depth / 4) layers each)
BIG = 0.2  # a head or MLP is named on its own in the grid when its total on either side is ≥ this share of |score|
# (the largest few such; the others of its band of layers stay bucketed)
BAND_GROUPS = ("high", "middle", "low", "unrotated")  # the groups of rotary bands (:func:`band_group`), in this order


def band_group(frequency: float, span: int) -> str:
    """The group of a rotary band of angular frequency θ (radians per token) on a text whose farthest tokens are
    ``span`` apart: "high", "middle", "low" or "unrotated" (see the module's docstring)."""
    if frequency == 0:
        return "unrotated"
    if 2 * math.pi / frequency <= span:
        return "high"
    return "low" if frequency * span <= NEARLY_STILL else "middle"


@dataclass(frozen=True)
class BandGroup:
    """The rotary bands of one group (:func:`band_group`), read together: which bands, how far they turn, and what
    they add to the score."""

    group: str  # "high", "middle", "low" or "unrotated" (:data:`BAND_GROUPS`)
    bands: tuple[int, ...]  # the bands' numbers, in order
    wavelength_min: float  # tokens (inf: never turned)
    wavelength_max: float
    contribution: float  # the group's term at the real offset
    content: float  # the same with no turn between q and k (offset 0)
    position: float  # contribution − content: what the turn by the real offset adds


@dataclass(frozen=True)
class PositionReading:
    """The score as position against content (:meth:`QKAttribution.position_reading`): the two halves, which one
    leads, and where a rotary model's position comes from."""

    content: float  # position_split()'s halves: they sum to the score
    position: float
    score: float
    offset: int  # i − j: how many tokens the key is before the query
    through: BandGroup | None  # rotary: the band group the position mostly comes through (None: a learned table,
    # whose position is the position embedding's terms)

    @property
    def leads(self) -> str:
        """"position" or "content": the larger in size (content on a tie)."""
        return "position" if abs(self.position) > abs(self.content) else "content"


@dataclass(frozen=True)
class Bucket:
    """One row (and column) of the bucketed grid (:meth:`QKAttribution.grid`): the parts it holds and their side
    totals."""

    bucket: str  # "token embedding", "head 9.4", "heads of layers 0–7", "biases", …
    parts: int  # how many parts it holds (1: a part named on its own)
    query_total: float  # its side totals (each side's buckets sum to the score)
    key_total: float
    largest: str  # its part with the largest |side total|
    largest_total: float  # that total, signed
    largest_side: str  # the side it is on: "query" or "key"


@dataclass(frozen=True)
class GridReading:
    """What the bucketed grid holds (:meth:`QKAttribution.grid_reading`): the cells of one part × one part together,
    its largest cell, and its buckets."""

    named_total: float  # the cells of one named part × one named part, summed
    largest_query: str  # the cell of the largest |term|: its query bucket, its key bucket and its term
    largest_key: str
    largest_contribution: float
    buckets: tuple[Bucket, ...]  # in the order the stream is written


@dataclass
class QKAttribution:
    """One score of one head split into query part × key part terms (:func:`qk_attribution`)."""

    model: str
    layer: int
    head: int
    query: int  # the query token (index among the real tokens)
    key: int  # the key token
    tokens: list[str]  # the real tokens, readable
    parts: list[str]  # the parts' names, the same on both sides: "token embedding", "head 0.7", "MLP 3", …
    matrix: np.ndarray  # [P, P] float64: row a (what wrote the query) × column b (what wrote the key)
    score: float  # the model's own pre-softmax score scale·q_i·k_j (float64 from the pass's q and k)
    bound: float  # scale·‖q_i‖·‖k_j‖: the score's scale (|score| ≤ bound), what |Δ| is judged against
    weight: float  # the attention weight α_ij the score became (the softmax of its row)
    n_layers: int = 0  # the model's depth, which sets the grid's bands of layers (0: unknown, the head's layer)
    positions: str = "absolute"  # the family's positions: "absolute" (a learned table, a part) or "rotary"
    bands: pd.DataFrame | None = None  # rotary: the score by frequency band (:meth:`band_table`); else None
    softcap: float | None = None  # Gemma 2: the layer's cap; ``score`` is split before it, ``weight`` is after it

    @property
    def total(self) -> float:
        """The sum of the parts: equal to ``score`` up to rounding (``delta``)."""
        return float(self.matrix.sum())

    @property
    def delta(self) -> float:
        return abs(self.total - self.score)

    def frame(self) -> pd.DataFrame:
        """Every nonzero term as a tidy table, largest |term| first: query_part, key_part, contribution, share (of
        the score; NaN when the score is not positive, where a share would flip the term's sign), with the layer,
        head and both tokens."""
        rows, cols = np.nonzero(self.matrix)
        values = self.matrix[rows, cols]
        order = np.argsort(-np.abs(values), kind="stable")
        names = np.array(self.parts, dtype=object)
        values = values[order]
        share = values / self.score if self.score > 0 else np.full(len(values), np.nan)  # see the docstring
        return pd.DataFrame({"layer": self.layer, "head": self.head, "query_token": self.tokens[self.query],
                             "key_token": self.tokens[self.key], "query_part": names[rows[order]],
                             "key_part": names[cols[order]], "contribution": values, "share": share},
                            index=pd.RangeIndex(len(values)))

    def top(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` largest terms by |contribution|."""
        return self.frame().head(n).reset_index(drop=True)

    def side(self, axis: str) -> pd.Series:
        """Each part's total on one side: "query" (row sums: what each query part adds with every key part) or
        "key" (column sums); each sums to the score."""
        sums = self.matrix.sum(axis=1 if axis == "query" else 0)
        return pd.Series(sums, index=self.parts, name=f"{axis}_side")

    # -- position: rotary bands, or the position embedding's terms ------------------------------------------------

    @property
    def offset(self) -> int:
        """i − j: how many tokens the key is before the query (negative: after it, in an encoder)."""
        return self.query - self.key

    @property
    def span(self) -> int:
        """How far apart the text's farthest tokens are (n − 1, at least 1): what the band groups are read against."""
        return max(len(self.tokens) - 1, 1)

    def band_table(self) -> pd.DataFrame:
        """Rotary families: the score by frequency band, one row per band b (pairs (b, b + d/2); dimensions never
        turned, under a partial rotary, one row of their own): band, frequency (θ_b, radians per token), wavelength
        (2π/θ_b, tokens; inf when unturned), contribution (the band's term at the real offset: the bands sum to the
        score), content (the same at offset 0, no turn between q and k), position (contribution − content), share
        (of the score; NaN unless the score is positive), group ("high", "middle", "low", "unrotated"). Empty for a
        family with a learned position table (its position is a part: :meth:`position_split`)."""
        if self.bands is None:
            return pd.DataFrame(columns=["band", "frequency", "wavelength", "contribution", "content", "position",
                                         "share", "group"])
        return self.bands.copy()

    def band_group_records(self) -> list[BandGroup]:
        """The bands in their groups (:data:`BAND_GROUPS` order; only the groups with a band), one
        :class:`BandGroup` each. Empty for a family with a learned position table."""
        if self.bands is None:
            return []
        if (kept := self.__dict__.get("_band_groups")) is not None:  # (read by several sentences of one panel)
            return list(kept)
        columns = {name: self.bands[name].to_numpy() for name in ("band", "group", "wavelength", "contribution",
                                                                   "content", "position")}
        groups = []
        for key in BAND_GROUPS:
            members = columns["group"] == key
            if not members.any():
                continue
            groups.append(BandGroup(key, tuple(int(b) for b in columns["band"][members]),
                                    float(columns["wavelength"][members].min()),
                                    float(columns["wavelength"][members].max()),
                                    float(columns["contribution"][members].sum()),
                                    float(columns["content"][members].sum()),
                                    float(columns["position"][members].sum())))
        self.__dict__["_band_groups"] = tuple(groups)
        return groups

    def band_groups(self) -> pd.DataFrame:
        """The band groups (:meth:`band_group_records`) as a table: group, bands (how many), wavelength_min and
        wavelength_max (tokens), contribution, content, position, share (NaN unless the score is positive). Empty
        for a family with a learned position table. Each group's words ("high-frequency bands 0–1 (local
        position)") are :func:`probes.explain.why.band_label`'s."""
        return self._groups_frame(self.band_group_records())

    def _groups_frame(self, groups: list[BandGroup]) -> pd.DataFrame:
        frame = pd.DataFrame([dict(group=g.group, bands=len(g.bands), wavelength_min=g.wavelength_min,
                                   wavelength_max=g.wavelength_max, contribution=g.contribution, content=g.content,
                                   position=g.position) for g in groups],
                             columns=["group", "bands", "wavelength_min", "wavelength_max", "contribution", "content",
                                      "position"])
        frame["share"] = frame["contribution"] / self.score if self.score > 0 else np.nan
        return frame

    def position_split(self) -> tuple[float, float]:
        """(content, position), summing to the score. Rotary: content is the score with q and k as they are but no
        turn between them (offset 0), position what the turn by the real offset adds. A learned position table:
        position is every term with a position embedding on either side (with any part), content every other."""
        if self.bands is not None:
            return float(self.bands.content.sum()), float(self.bands.position.sum())
        at = [p for p, name in enumerate(self.parts) if name in POSITION_PARTS]
        touched = np.zeros(self.matrix.shape, dtype=bool)
        touched[at, :] = touched[:, at] = True
        position = float(self.matrix[touched].sum())
        return float(self.matrix[~touched].sum()), position

    def position_reading(self) -> PositionReading:
        """Position against content (:meth:`position_split`), and on a rotary model the band group the position
        mostly comes through: the one with the largest |position| among those whose position has the sign of the
        whole (among them all when none has)."""
        content, position = self.position_split()
        through = None
        if self.bands is not None:
            records = self.band_group_records()
            same = [g for g in records if np.sign(g.position) == np.sign(position)] or records
            through = max(same, key=lambda g: abs(g.position))  # (the first of equals, as a stable sort gives)
        return PositionReading(content, position, self.score, self.offset, through)

    # -- a grid a person reads: embeddings, big heads and MLPs by name, the rest in bands of layers --------------

    def _buckets(self, n: int) -> dict[str, str]:
        """Each part's bucket: the embeddings and the biases (both kinds in one, "biases") as they are; a head or
        MLP whose total on either side is at least :data:`BIG` of |score| by name (the ``n`` largest such); the
        other heads and MLPs by bands of ceil(depth / :data:`LAYER_BANDS`) layers ("heads of layers 0–7", "MLPs of
        layers 8–15"). A bucket of one part is named after it."""
        depth = self.n_layers or max(self.layer, 1)
        width = max(1, math.ceil(depth / LAYER_BANDS))
        size = dict(zip(self.parts, np.maximum(np.abs(self.matrix.sum(axis=1)), np.abs(self.matrix.sum(axis=0))),
                        strict=True))
        layered = {name for name in self.parts if name.startswith(("head ", "MLP "))}
        big = set(sorted((p for p in self.parts if p in layered and size[p] >= BIG * abs(self.score)),
                         key=lambda p: -size[p])[:n])
        bucket = {}
        for name in self.parts:
            if name in ("biases", BIAS_QK):
                bucket[name] = "biases"
            elif name in layered and name not in big:
                low = int(name.split()[1].split(".")[0]) // width * width
                high = min(low + width, max(self.layer, 1)) - 1
                layers = f"layer {low}" if low == high else f"layers {low}–{high}"
                bucket[name] = f"heads of {layers}" if name.startswith("head ") else f"MLPs of {layers}"
            else:
                bucket[name] = name
        members = Counter(bucket.values())
        return {name: name if members[b] == 1 else b for name, b in bucket.items()}

    def _grouping(self, n: int) -> tuple[list[str], np.ndarray]:
        """The buckets in the order the stream is written, and each part's bucket (its index among them)."""
        mapping = self._buckets(n)
        names = list(dict.fromkeys(mapping[p] for p in self.parts))
        at = {name: i for i, name in enumerate(names)}
        return names, np.array([at[mapping[p]] for p in self.parts], dtype=np.int64)

    def bucket_records(self, n: int = 3) -> list[Bucket]:
        """The grid's rows and columns (:meth:`grid`), in the order the stream is written, one :class:`Bucket` each."""
        names, of = self._grouping(n)
        sides = {"query": self.matrix.sum(axis=1), "key": self.matrix.sum(axis=0)}
        found = []
        for b, bucket in enumerate(names):
            members = np.flatnonzero(of == b)
            q_side, k_side = sides["query"][members], sides["key"][members]
            top_q, top_k = int(np.argmax(np.abs(q_side))), int(np.argmax(np.abs(k_side)))  # (the first, on a tie)
            top, axis = (top_q, "query") if abs(q_side[top_q]) >= abs(k_side[top_k]) else (top_k, "key")
            found.append(Bucket(bucket, len(members), float(q_side.sum()), float(k_side.sum()),
                                self.parts[members[top]], float(sides[axis][members[top]]), axis))
        return found

    def buckets(self, n: int = 3) -> pd.DataFrame:
        """The grid's buckets (:meth:`bucket_records`) as a table: bucket, parts (how many it holds), query_total and
        key_total (its side totals: each column sums to the score), largest (its part with the largest |side
        total|), largest_total (that total, signed), largest_side ("query" or "key"). What a bucket holds in words
        ("72 parts, none above 4% of 4.83 on either side …") is :func:`probes.explain.why.holds`'."""
        return pd.DataFrame([vars(b) for b in self.bucket_records(n)],
                            columns=["bucket", "parts", "query_total", "key_total", "largest", "largest_total",
                                     "largest_side"])

    def grid(self, n: int = 3) -> pd.DataFrame:
        """The score as a small grid of buckets (:meth:`buckets`: the embeddings, the biases, the ``n`` heads or
        MLPs big enough to be named, the other heads and MLPs in bands of layers) × the same buckets; it sums to
        the score. Tidy: query_part, key_part, contribution, query_parts and key_parts (how many parts each side's
        bucket holds: 1 for a part named on its own)."""
        names, of = self._grouping(n)
        groups = np.zeros((len(names), len(self.parts)))
        groups[of, np.arange(len(self.parts))] = 1.0
        small = groups @ self.matrix @ groups.T
        counts = groups.sum(1).astype(int)
        rows, cols = np.divmod(np.arange(len(names) ** 2), len(names))  # row by row, as the stream is written
        return pd.DataFrame({"query_part": [names[a] for a in rows], "key_part": [names[b] for b in cols],
                             "contribution": small[rows, cols], "query_parts": counts[rows],
                             "key_parts": counts[cols]})

    @staticmethod
    def _named(grid: pd.DataFrame) -> float:
        return float(grid.contribution[(grid.query_parts == 1) & (grid.key_parts == 1)].sum())

    def named_total(self, n: int = 3) -> float:
        """What the grid's cells of one part × one part sum to (the rest is in cells with a bucket of several)."""
        return self._named(self.grid(n))

    def grid_reading(self, n: int = 3) -> GridReading:
        """What the grid (:meth:`grid`) holds: its named cells' total (:meth:`named_total`), its largest cell and its
        buckets (:meth:`bucket_records`)."""
        grid = self.grid(n)
        big = grid.loc[grid.contribution.abs().idxmax()]
        return GridReading(self._named(grid), big.query_part, big.key_part, float(big.contribution),
                           tuple(self.bucket_records(n)))

    # -- the words these numbers used to make here, kept for a release (deprecated) -------------------------------

    def reading(self) -> str:
        """Deprecated: :func:`probes.explain.why.reading`."""
        return _deprecated("QKAttribution.reading()", "reading(why)").reading(self)

    def effect(self, value: float, amount: bool = True) -> str:
        """Deprecated: :func:`probes.explain.why.pushes` (``pushes(value, why.score, amount)``)."""
        return _deprecated("QKAttribution.effect(value)", "pushes(value, why.score)").pushes(value, self.score, amount)

    def grid_caption(self, n: int = 3) -> str:
        """Deprecated: :func:`probes.explain.why.grid_caption`."""
        return _deprecated("QKAttribution.grid_caption(n)", "grid_caption(why, n)").grid_caption(self, n)

    def sentence(self, row) -> str:
        """Deprecated: :func:`probes.explain.why.sentence`."""
        return _deprecated("QKAttribution.sentence(row)", "sentence(why, row)").sentence(self, row)


_WORDS = "probes.explain.why"  # where this module's words went (the deprecated names below point there)
_MOVED = ("GROUPS", "describe", "percent", "pushes")  # module names that were words, now _WORDS's


def _deprecated(old: str, new: str) -> Any:
    """Warn that ``old`` is deprecated for :mod:`probes.explain.why`'s ``new``, and return that module. It stands a
    floor above this one, which imports nothing from it: only these deprecated names reach it, by name at call time
    (which the floors contract does not see), and they go with the next release, and with them this one call up."""
    warnings.warn(f"{old} is deprecated: use {_WORDS}.{new}; this module returns numbers, {_WORDS} says them in words",
                  DeprecationWarning, stacklevel=3)
    return importlib.import_module(_WORDS)


def __getattr__(name: str) -> Any:
    """The module's old words (``pushes``, ``percent``, ``describe``, ``GROUPS``), deprecated: now
    :mod:`probes.explain.why`'s."""
    if name in _MOVED:
        return getattr(_deprecated(name, name), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class _HeadPass:
    """One from-scratch pass up to layer ``layer`` (the layers after it are not needed) and what splitting head
    ``layer``.``head``'s scores reads from it: shared by :func:`qk_attribution` and :func:`senders_on_text`."""

    net: SplitNetwork
    enc: Encoding
    inputs: list[torch.Tensor]  # each layer's input (resid_pre) up to this one's, [1, L, D]
    z: list[torch.Tensor]  # each earlier layer's head outputs (attn.z), [1, H, L, d]
    layer: int
    head: int
    group: int  # the key/value head this head reads (grouped-query)
    scale: float
    n: int  # real tokens
    q: torch.Tensor  # [n, d] float64: the head's own q, from the pass
    k: torch.Tensor  # [n, d] float64: its key/value head's own k
    allowed: torch.Tensor  # [n, n] bool: the keys each query may see (causal mask, sliding window)

    def parts(self, positions: list[int]) -> tuple[list[str], torch.Tensor, torch.Tensor]:
        """The residual parts' names (and :data:`BIAS_QK` last) and this head's q and k of each part at
        ``positions``: ``[P + 1, len(positions), d]`` each, float64."""
        where = torch.tensor(positions, device=self.enc.input_ids.device)
        named = self.net.residual_parts(self.layer, self.enc.input_ids, self.enc.token_type_ids, self.inputs,
                                        self.z, where, torch.float64)
        q, k = self.net.qk_parts(self.layer, torch.stack(list(named.values())), self.inputs[self.layer][0, where],
                                 where, self.enc.input_ids.shape[1])
        return [*named, BIAS_QK], q[:, self.head], k[:, self.group]


def _head_pass(model, text: str, layer: int, head: int, pair: str | None, truncate: bool) -> _HeadPass:
    net = build(model)  # an architecture the from-scratch path does not cover is refused here
    assert isinstance(net, SplitNetwork)  # every family's network splits its scores (tests/scratch/test_family.py)
    n_layers, n_heads = len(net.layers), model.n_heads
    check_layer_head(layer, head, n_layers, n_heads, model.name)
    enc = model.encode(text, pair, truncate=truncate).to(model.device)  # an empty text is refused here (EmptyInput)
    n = int(enc.attention_mask.sum())
    # the layers before this one, and its input: the pass stops there
    got = run_with_hooks(model, enc, logits=False, keep=["resid_pre", "attn.z"], stop_after=point(layer, "resid_pre"))
    inputs = got.each("resid_pre")
    group = head // (n_heads // model.n_kv_heads)
    allowed = allowed_keys(enc.attention_mask, net.causal, window=model.family.window(model.config, layer))
    with torch.inference_mode():
        own_q, own_k, _ = net.qkv(layer, inputs[layer])
    scale = model.family.scale(model.config, layer)
    return _HeadPass(net, enc, inputs, got.each("attn.z"), layer, head, group, scale, n, own_q[0, head, :n].double(),
                     own_k[0, group, :n].double(), allowed[0, 0, :n, :n].expand(n, n))


KEPT_PASS_BYTES = 64 * 2**20  # a head's pass kept for the next cell of the same head and text up to this size


_kept_pass: list[tuple[Any, tuple, _HeadPass]] = []  # the last head's pass: (a weak reference to its model, key, pass)
_kept_lock = threading.Lock()


def _pass_bytes(hp: _HeadPass) -> int:
    return sum(t.numel() * t.element_size() for t in (*hp.inputs, *hp.z))


def _head_pass_kept(model, text: str, layer: int, head: int, pair: str | None, truncate: bool) -> _HeadPass:
    """:func:`_head_pass`, the last one kept: a person clicks cell after cell of one head on one text, and each
    split reads the same pass (only the two tokens' parts differ). Kept only for the same model object (a weak
    reference: a model freed frees its pass) and up to :data:`KEPT_PASS_BYTES`."""
    key = (text, layer, head, pair, truncate)
    with _kept_lock:
        for ref, kept_key, hp in _kept_pass:
            if ref() is model and kept_key == key:
                return hp
    hp = _head_pass(model, text, layer, head, pair, truncate)
    try:
        ref = weakref.ref(model)
    except TypeError:  # a model that takes no weak reference: not kept
        return hp
    with _kept_lock:
        _kept_pass[:] = [(ref, key, hp)] if _pass_bytes(hp) <= KEPT_PASS_BYTES else []
    return hp


@reader
def qk_attribution(model, text: str, layer: int, head: int, query: int, key: int, pair: str | None = None,
                   truncate: bool = False) -> QKAttribution:
    """Split head ``layer``.``head``'s score of query token ``query`` on key token ``key`` (indices among the real
    tokens of ``text``, and of ``pair``'s for a BERT sentence pair) into query part × key part terms; the model's
    own from-scratch pass (eager attention), the split in float64. ``truncate``: keep the first tokens of a text
    longer than the context window (else it is refused). The pass up to the head's layer is kept for the next call
    on the same head and text (another cell: the same numbers, without the pass)."""
    hp = _head_pass_kept(model, text, layer, head, pair, truncate)
    n = hp.n
    for name, position in (("query", query), ("key", key)):
        check_index(position, n, f"{name} token", f"the text's {n} tokens")
    row = hp.allowed[query]
    check_seen_key(key, query, bool(row[key]), (layer, head), hp.net.causal, model.family.window(model.config, layer))
    with torch.inference_mode():
        names, q, k = hp.parts([query, key])
        q_i, k_j = q[:, 0], k[:, 1]  # [P + 1, d]: the query's parts at i, the key's at j
        matrix = hp.scale * (q_i @ k_j.T)
        scores = hp.scale * (hp.k @ hp.q[query])  # the row: every key's score, from the pass's own q and k
        score = float(scores[key])  # before a soft-cap: the score the parts sum to
        softcap = model.family.softcap(model.config, layer)  # Gemma 2: cap·tanh(s / cap), then the softmax
        capped = soft_cap(scores.clone(), softcap).masked_fill(~row, float("-inf"))
        weight = float(torch.softmax(capped, -1)[key])
        bound = hp.scale * float(hp.q[query].norm() * hp.k[key].norm())
    grid = matrix.cpu().numpy()
    keep = [p for p in range(len(names)) if grid[p].any() or grid[:, p].any()]  # a part that is all zero: none
    enc = hp.enc
    tokens = [t.text for t, real in zip(enc.tokens[0], enc.attention_mask[0].bool().tolist(), strict=True) if real]
    rotary = model.family.positions == "rotary"
    return QKAttribution(model.name, layer, head, query, key, tokens, [names[p] for p in keep],
                         grid[np.ix_(keep, keep)], score, bound, weight, n_layers=len(hp.net.layers),
                         positions="rotary" if rotary else "absolute",
                         bands=_bands(hp, query, key, score) if rotary else None, softcap=softcap)


def _bands(hp: _HeadPass, query: int, key: int, score: float) -> pd.DataFrame:
    """The head's score (``hp``: its pass) of ``query`` on ``key`` by rotary frequency band
    (:meth:`QKAttribution.band_table`): band b's term is the dot product of pair b (dimensions b and b + r/2, r the
    turned width) of the pass's own turned q and k, so the bands sum to the score; its content the same with both
    turned back by their own positions' angles (the network's tables, the inverse of ``x·cos +
    rotate_half(x)·sin``), so no turn is left between them."""
    length = hp.enc.input_ids.shape[1]
    assert isinstance(hp.net, RotaryNetwork)  # called only where the family's positions are rotary
    cos, sin = (t[0].to(torch.float64) for t in hp.net.rotary(max(length, 2), hp.q.device, hp.layer))  # [L, r]
    d, r = hp.q.shape[-1], cos.shape[-1]
    half = r // 2
    if r % 2 or r > d or not (torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])):
        raise UnsupportedModel(f"{hp.net.__class__.__name__}'s rotary tables do not turn pairs (i, i + d/2) (the "
                               "rotate-half layout): the split by frequency band reads that layout only; the split "
                               "by parts (why.top, why.grid) still holds")
    q, k = hp.q[query], hp.k[key]

    def back(x, p):  # x turned back by position p's angles: the pair before the rotary turn
        c, s_ = cos[p, :half], sin[p, :half]
        return x[:half] * c + x[half:r] * s_, x[half:r] * c - x[:half] * s_

    (q1, q2), (k1, k2) = back(q, query), back(k, key)
    turned = hp.scale * (q[:half] * k[:half] + q[half:r] * k[half:r])
    content = hp.scale * (q1 * k1 + q2 * k2)
    frequency = torch.atan2(sin[1, :half], cos[1, :half])  # θ_b: the angle of position 1
    rows = pd.DataFrame(dict(band=np.arange(half), frequency=frequency.cpu().numpy(),
                             contribution=turned.cpu().numpy(), content=content.cpu().numpy()))
    if r < d:  # a partial rotary: the dimensions past r are never turned, one band of their own
        still = float(hp.scale * (q[r:] @ k[r:]))
        rows.loc[half] = dict(band=half, frequency=0.0, contribution=still, content=still)
    rows["band"] = rows["band"].astype(int)
    with np.errstate(divide="ignore"):
        rows.insert(2, "wavelength", np.where(rows.frequency > 0, 2 * np.pi / rows.frequency, np.inf))
    rows["position"] = rows["contribution"] - rows["content"]
    rows["share"] = rows["contribution"] / score if score > 0 else np.nan
    span = max(int(hp.n) - 1, 1)
    rows["group"] = [band_group(float(f), span) for f in rows.frequency]
    return rows


@reader
def senders_on_text(model, text: str, layer: int, head: int, cells: int = 8, pair: str | None = None,
                    truncate: bool = False, first_token: bool = False) -> pd.DataFrame:
    """Data-dependent composition: how much of head ``layer``.``head``'s scores on this text comes from each earlier
    head's output, on the query side (Q-composition) and on the key side (K-composition). The ``cells`` (query, key)
    cells the head weighs most are split as :func:`qk_attribution` splits one, and each sender's side totals are
    summed over them. The first token is left out as a key (an attention sink would be every head's top cell) unless
    ``first_token``. One row per sender and side: sender_layer, sender_head, kind ("q" or "k"), contribution (its
    summed side total), share (of the cells' summed scores), cells (how many were read)."""
    check_receiver((layer, head), len(build(model).layers), model.n_heads, model.name)
    hp = _head_pass(model, text, layer, head, pair, truncate)
    n, scale = hp.n, hp.scale
    with torch.inference_mode():
        scores = scale * (hp.q @ hp.k.T)  # [n, n]
        weights = torch.softmax(scores.masked_fill(~hp.allowed, float("-inf")), -1)
        if not first_token:
            weights[:, 0] = 0.0
        weights[0] = 0.0  # the first query sees only itself in a decoder: nothing to compare
        picked = torch.topk(weights.flatten(), min(cells, int((weights > 0).sum()))).indices
        if len(picked) == 0:
            raise BadOption(f"the text is too short for head {layer}.{head} to weigh any cell but the first token's")
        queries, keys = (picked // n).tolist(), (picked % n).tolist()
        positions = sorted(set(queries) | set(keys))
        at = {p: i for i, p in enumerate(positions)}
        names, q, k = hp.parts(positions)  # [P + 1, n_positions, d]
        q_side = torch.zeros(len(names), dtype=torch.float64)
        k_side = torch.zeros_like(q_side)
        total = 0.0
        for i, j in zip(queries, keys, strict=True):  # picked // n and picked % n: one of each per cell
            q_i, k_j = q[:, at[i]], k[:, at[j]]  # [P + 1, d]
            q_side += scale * (q_i @ k_j.sum(0))  # each query part with the whole key
            k_side += scale * (k_j @ q_i.sum(0))  # each key part with the whole query
            total += float(scale * (q_i.sum(0) @ k_j.sum(0)))
    rows = []
    for p, name in enumerate(names):
        if name.startswith("head "):
            s_layer, s_head = (int(x) for x in name.split()[1].split("."))
            for kind, side in (("q", q_side), ("k", k_side)):
                rows.append(dict(sender_layer=s_layer, sender_head=s_head, kind=kind, contribution=float(side[p]),
                                 share=float(side[p]) / total if total else float("nan"), cells=len(queries)))
    return pd.DataFrame(rows)
