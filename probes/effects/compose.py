"""Composition scores (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"), from the weights alone:
how much of what an earlier head (the *sender*) writes into the residual stream a later head (the *receiver*) can
read through its query, its key or its value.

Convention (TransformerLens's ``all_composition_scores``; a residual row x, maps act on the right): each head has

    W_OV = W_V · W_O      (D × D, rank ≤ d: what it reads × what it writes)
    W_QK = W_Q · W_Kᵀ     (D × D: score = x_query · W_QK · x_keyᵀ)

and for a sender s in an earlier layer than the receiver r

    Q-composition   ‖W_OV^s · W_QK^r‖_F    ÷ (‖W_OV^s‖_F · ‖W_QK^r‖_F)   s's output read as r's query
    K-composition   ‖W_OV^s · (W_QK^r)ᵀ‖_F ÷ (‖W_OV^s‖_F · ‖W_QK^r‖_F)   s's output read as r's key
    V-composition   ‖W_OV^s · W_OV^r‖_F    ÷ (‖W_OV^s‖_F · ‖W_OV^r‖_F)   s's output read as r's value

a number in [0, 1]; NaN where a head's map is all zero (0 ÷ 0: a head that reads or writes nothing). Beside every
score, a baseline: the same score of random Gaussian factors of the same shapes (W_V, W_O, W_Q, W_K drawn, the
products built the same way), mean and standard deviation over ``draws`` draws. Every head has the same shapes, and
the three kinds' products have the same shapes too, so one baseline serves all.

**Weights only.** The maps come from :meth:`probes.scratch.family.SplitNetwork.head_weights`: the gain of the norm a
layer's attention reads through (LayerNorm or RMSNorm weight) is folded into the rows of its W_Q, W_K and W_V, and
Qwen3's QK-norm gains (an RMSNorm over each head's q and k) into the columns of W_Q and W_K; the biases, the norms'
centring and their input-dependent scale (QK-norm's too: 1 ÷ the rms of the head's own q or k) are left out.
OLMo 2's QK-norm spans the whole projection: its gain is folded into W_Q's and W_K's columns too. Rotary families
(a record's ``positions == "rotary"``) are scored at relative offset 0 (no rotation: the query and the key at the
same position). Grouped-query families: a query head's W_K and W_V are those of the key/value head
it reads (h // (H / H_kv)). A post-attention norm's gain (Gemma's, OLMo 2's) is folded into the columns of W_O (its
scale left out). BERT (post-norm) is handled with the gain of the LayerNorm that made each layer's input folded the
same way; the other LayerNorms between a sender's write and the receiver (each layer's two) are left out.

**Two conventions** (``convention=``, :data:`CONVENTIONS`; ``"raw"`` by default, and every output names the one used):

* ``"raw"``: the maps above, LayerNorm's centring left out (this library's numbers since composition scores came in).
* ``"transformerlens"``: TransformerLens's default weights, the ones ``HookedTransformer.from_pretrained`` gives
  (``fold_ln=True``, ``center_writing_weights=True``; TransformerLens 4: ``TransformerBridge`` after
  ``enable_compatibility_mode()``) and ``all_composition_scores`` reads. LayerNorm's output is mean-zero over the
  residual dimension D (LN(x) = P·x ÷ σ · g + b, P = I − 11ᵀ/D), so its centring is folded in too: each reader's
  gain-folded W_Q, W_K, W_V (``[D, d]``) has its mean over the D rows subtracted (P·diag(g)·W, TransformerLens's
  ``fold_layer_norm(center_weights=True)``: the gain first, then the centring), and every head's W_O (``[d, D]``) its
  mean over the D columns (W_O·P, ``center_writing_weights``; the embeddings and the MLPs' outputs are centred there
  too, but no composition score reads them). Both are exact for the model: nothing a head writes along the all-ones
  direction is ever read. RMSNorm (Llama, Mistral, Qwen2, SmolLM2) does not centre and TransformerLens folds only
  its gain there, so both conventions give the same numbers. BERT (post-norm) is refused: TransformerLens folds no
  LayerNorm into BERT (its ``fold_ln`` assumes the norm sits before each sublayer; TransformerLens 4 skips it with a
  warning and centres only the writers), so there is no TransformerLens default to match there.

**Low-rank algebra.** No D × D matrix is built per pair. With W_OV^s = A·B (A = W_V^s ``[D, d]``, B = W_O^s
``[d, D]``) and the receiver's map C·Eᵀ (Q: C = W_Q^r, E = W_K^r; K: C = W_K^r, E = W_Q^r; V: C = W_V^r, E = W_O^rᵀ,
each ``[D, d]``): ‖A·B·C·Eᵀ‖_F² = tr(EᵀE · Mᵀ·AᵀA·M) with M = B·C (d × d). Writing each Gram matrix as RᵀR (R the
d × d triangle of a QR factorisation, AᵀA = R_AᵀR_A) gives ‖A·B·C·Eᵀ‖_F = ‖(R_A·B)·(C·R_Eᵀ)‖_F: a d × d block of one
product of two stacked tall matrices, ``[senders·d, D] @ [D, receivers·d]``, per receiver layer. Likewise
‖W_OV^s‖_F = ‖R_A·B‖_F and ‖C·Eᵀ‖_F = ‖C·R_Eᵀ‖_F.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd
import torch

from ..errors import BadOption
from ..head_index import check_receiver, parse_head
from ..scratch import DecoderNetwork, build, head_writer
from ..seam import reader

if TYPE_CHECKING:
    from ..models import LocalModel
    from ..scratch import Network

KINDS = ("q", "k", "v")
ABOUT = {"q": "the sender's output read as the receiver's query (‖W_OV^s · W_QK^r‖)",
         "k": "the sender's output read as the receiver's key (‖W_OV^s · W_QK^rᵀ‖)",
         "v": "the sender's output read as the receiver's value (‖W_OV^s · W_OV^r‖)"}
NOTE = ("scores from the weights alone: norm gains folded into W_Q, W_K, W_V; biases and the norms' centring and "
        "scale left out")
NOTE_CENTRED = ("scores from the weights alone: norm gains folded into W_Q, W_K, W_V and LayerNorm's centring too "
                "(W_Q, W_K, W_V and every head's W_O centred over the residual dimension, as TransformerLens's fold_ln "
                "and center_writing_weights do); biases and the norms' scale left out")
CONVENTIONS = {"raw": "LayerNorm's centring left out",
               "transformerlens": "LayerNorm's centring folded in, as TransformerLens's defaults do: fold_ln, "
                                  "center_writing_weights"}
DEFAULT_CONVENTION = "raw"
ROTARY_NOTE = "rotary positions: scored at relative offset 0 (no rotation)"


def parse_kinds(kind: str | Iterable[str]) -> tuple[str, ...]:
    """``"q"``, ``"all"``, ``"q,k"`` or a sequence of them -> the kinds, in q, k, v order."""
    names = [kind] if isinstance(kind, str) else list(kind)
    wanted: set[str] = set()
    for name in names:
        for part in str(name).lower().split(","):
            part = part.strip()
            if part == "all":
                wanted.update(KINDS)
            elif part in KINDS:
                wanted.add(part)
            else:
                raise BadOption(f"composition kind {part!r}: give q, k, v or all")
    if not wanted:
        raise BadOption("no composition kind given: give q, k, v or all")
    return tuple(k for k in KINDS if k in wanted)


def parse_convention(convention: str) -> str:
    """``"raw"`` or ``"transformerlens"`` (any case, surrounding spaces ignored), else BadOption naming both."""
    name = str(convention).strip().lower()
    if name not in CONVENTIONS:
        raise BadOption(f"composition convention {convention!r}: give raw (LayerNorm's centring left out, the default) "
                        "or transformerlens (folded in, as TransformerLens's defaults do)")
    return name


def network(model: LocalModel | Network) -> Network:
    """The from-scratch network of ``model`` (a loaded :class:`~probes.models.LocalModel`), or ``model`` itself if it is
    one."""
    if hasattr(model, "head_weights"):
        return cast("Network", model)
    return build(model)


def centres(net) -> bool:
    """Whether the norm a pre-norm decoder's attention reads through subtracts the mean (LayerNorm: GPT-2) or not
    (RMSNorm: Llama, Mistral, Qwen2), asked of the network itself: a constant row through its final norm (the same
    kind as every layer's) is zero only where the norm centres. False for a network with no final norm (BERT)."""
    if not isinstance(net, DecoderNetwork):
        return False
    w_o = net.head_out(0)[0]
    row = torch.ones(1, w_o.shape[-1], dtype=w_o.dtype)
    normed, _bias = net.final_norm(row)
    return bool(normed(row).abs().max() == 0)


POST_NORM = ("a post-norm model, like BERT: TransformerLens folds no LayerNorm into it, its fold_ln assuming the norm "
             "sits before each sublayer; raw is the only convention here")
PRE_NORM_ENCODER = ("a pre-norm encoder, like ModernBERT: TransformerLens has no such model, so there is no default of "
                    "its to match; raw is the only convention here")
SAME = "RMSNorm does not centre: the raw and transformerlens conventions give the same numbers here"


@reader
def conventions(model: LocalModel | Network) -> dict[str, str]:
    """The conventions that apply to ``model`` (a loaded model or its network), each in words for it: both on a
    LayerNorm decoder (GPT-2); both, with the same numbers, on an RMSNorm one (Llama, SmolLM2); ``raw`` alone on a
    post-norm model (BERT) or a pre-norm encoder (ModernBERT, whose network says ``pre_norm``)."""
    net = network(model)
    if not isinstance(net, DecoderNetwork):
        return {"raw": PRE_NORM_ENCODER if getattr(net, "pre_norm", False) else POST_NORM}
    return dict(CONVENTIONS) if centres(net) else dict.fromkeys(CONVENTIONS, SAME)


def centring(net, convention: str) -> bool:
    """Whether ``convention`` centres ``net``'s maps: only ``"transformerlens"`` on a LayerNorm decoder. BadOption
    for ``"transformerlens"`` on a post-norm network (BERT): TransformerLens folds no LayerNorm into it."""
    if parse_convention(convention) == "raw":
        return False
    if not isinstance(net, DecoderNetwork) and getattr(net, "pre_norm", False):
        raise BadOption("the transformerlens convention is for pre-norm decoders (GPT-2, Llama…): this model is a "
                        "pre-norm encoder (ModernBERT), which TransformerLens does not have, so it has no default to "
                        "match here; use the raw convention")
    if not isinstance(net, DecoderNetwork):
        raise BadOption("the transformerlens convention is for pre-norm decoders (GPT-2, Llama…): this model is "
                        "post-norm (BERT), and TransformerLens folds no LayerNorm into BERT (its fold_ln assumes the "
                        "norm sits before each sublayer), so it has no default to match here; use the raw convention")
    return centres(net)


@reader
def convention_said(model: LocalModel | Network, convention: str = DEFAULT_CONVENTION) -> str:
    """The convention in words for this model: ``"raw (…)"`` or ``"transformerlens (…)"``, saying where both give
    the same numbers (RMSNorm) or where only raw applies (post-norm; ``"transformerlens"`` there: BadOption)."""
    name, net = parse_convention(convention), network(model)
    centring(net, name)  # refuses transformerlens on a post-norm model
    return f"{name} ({conventions(net)[name]})"


def parse_receiver(spec: str, n_layers: int, n_heads: int) -> tuple[int, int]:
    """``"18.6"`` -> (18, 6), checked: inside the model (:func:`probes.head_index.parse_head`), and not in layer 0
    (it has no earlier heads)."""
    return check_receiver(parse_head(spec, n_layers, n_heads, "receiver"), n_layers, n_heads)


class HeadMaps:
    """Every head as a sender, float64 (or ``dtype``), gathered once: X = R_V·W_O ``[L, H, d, D]`` and ‖W_OV‖_F; a
    receiver's factors are read from its own layer's weights when asked (:meth:`receiver_factors`), so no stack of
    every layer's W_Q, W_K, W_V and W_O is held (SmolLM2's would be 0.3 GiB in float64, beside the model).
    ``convention``: ``"raw"`` or ``"transformerlens"`` (the module docstring); ``centred`` says whether it changed
    the maps (False on RMSNorm models)."""

    def __init__(self, net, dtype: torch.dtype = torch.float64, convention: str = DEFAULT_CONVENTION):
        self.net, self.dtype = net, dtype
        self.convention = parse_convention(convention)
        self.centred = centring(net, self.convention)
        self.x = torch.stack([sender_rows(*self._factors(layer)[2:]) for layer in range(len(net.layers))])
        self.n_layers, self.n_heads, self.d, self.width = self.x.shape
        self.x_norm = self.x.flatten(-2).norm(dim=-1)  # ‖W_OV‖_F [L, H]

    def _factors(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """W_Q, W_K, W_V ``[H, D, d]`` (key/value heads repeated for the query heads that read them),
        W_O ``[H, d, D]``."""
        w_q, w_k, w_v = (t.detach().to("cpu", self.dtype) for t in self.net.head_weights(layer))
        group = w_q.shape[0] // w_k.shape[0]  # grouped-query: query head h reads key/value head h // group
        w_o = head_writer(self.net, layer).detach().to("cpu", self.dtype)  # Gemma: the post-norm's gain folded in
        if self.centred:  # LayerNorm's centring folded in: P·W for the readers, W_O·P for the writers
            w_q, w_k, w_v = (w - w.mean(dim=-2, keepdim=True) for w in (w_q, w_k, w_v))
            w_o = w_o - w_o.mean(dim=-1, keepdim=True)
        return w_q, w_k.repeat_interleave(group, dim=0), w_v.repeat_interleave(group, dim=0), w_o

    def receiver_factors(self, kind: str, layer: int, heads: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(C, E) ``[R, D, d]`` each for ``heads`` of ``layer``, the receiver's map being C·Eᵀ."""
        q, k, v, o = (t[list(heads)] for t in self._factors(layer))
        return {"q": (q, k), "k": (k, q), "v": (v, o.transpose(-1, -2))}[kind]


def triangle(a: torch.Tensor) -> torch.Tensor:
    """R ``[..., d, d]`` with RᵀR = aᵀa for ``a`` ``[..., D, d]`` (so ‖a·Z‖_F = ‖R·Z‖_F for any Z)."""
    return torch.linalg.qr(a, mode="r")[1] if a.shape[-2] >= a.shape[-1] else a


def sender_rows(w_v: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """X = R_A·B ``[..., d, D]``: ‖X·Y‖_F = ‖W_V·W_O·Y‖_F and ‖X‖_F = ‖W_OV‖_F."""
    return triangle(w_v) @ w_o


def receiver_cols(c: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Y = C·R_Eᵀ ``[..., D, d]``: ‖X·Y‖_F = ‖X·C·Eᵀ‖_F and ‖Y‖_F = ‖C·Eᵀ‖_F."""
    return c @ triangle(e).transpose(-1, -2)


def block_norms(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """‖x_s · y_r‖_F for every s, r: ``x`` ``[S, d, D]``, ``y`` ``[R, D, d']`` -> ``[S, R]``, by one product of the
    stacked matrices ``[S·d, D] @ [D, R·d']``."""
    (s, d, width), (r, _, d2) = x.shape, y.shape
    prod = x.reshape(s * d, width) @ y.permute(1, 0, 2).reshape(width, r * d2)
    return prod.view(s, d, r, d2).pow(2).sum((1, 3)).sqrt()


def scores(maps: HeadMaps, kind: str, receivers: Sequence[tuple[int, int]]) -> pd.DataFrame:
    """The ``kind`` score of every earlier head onto each of ``receivers``, as a tidy frame (no baseline)."""
    x, x_norm = maps.x, maps.x_norm
    frames = []
    for layer in sorted({lay for lay, _ in receivers}):
        heads = sorted({h for lay, h in receivers if lay == layer})
        y = receiver_cols(*maps.receiver_factors(kind, layer, heads))  # [R, D, d]
        y_norm = y.flatten(-2).norm(dim=-1)
        senders = x[:layer].reshape(layer * maps.n_heads, maps.d, maps.width)
        num = block_norms(senders, y)  # [S, R]
        score = num / (x_norm[:layer].reshape(-1, 1) * y_norm.reshape(1, -1))
        s_layer, s_head = np.divmod(np.arange(layer * maps.n_heads), maps.n_heads)
        for j, head in enumerate(heads):
            frames.append(pd.DataFrame(dict(sender_layer=s_layer, sender_head=s_head, receiver_layer=layer,
                                            receiver_head=head, kind=kind, score=score[:, j].numpy())))
    return pd.concat(frames, ignore_index=True)


def random_baseline(width: int, d: int, draws: int = 20, seed: int = 0,
                    dtype: torch.dtype = torch.float64) -> tuple[float, float]:
    """Mean and standard deviation, over ``draws`` draws, of the composition score of random Gaussian factors of a
    head's shapes (W_V, W_Q, W_K ``[D, d]``, W_O ``[d, D]`` for the sender and the receiver, products built as the
    real ones). The same for the three kinds (their products have the same shapes)."""
    gen = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(draws, *shape, generator=gen, dtype=dtype)  # noqa: E731
    a, b, c, e = draw(width, d), draw(d, width), draw(width, d), draw(width, d)
    x, y = sender_rows(a, b), receiver_cols(c, e)  # [draws, d, D], [draws, D, d]
    values = (x @ y).flatten(1).norm(dim=-1) / (x.flatten(1).norm(dim=-1) * y.flatten(1).norm(dim=-1))
    return float(values.mean()), float(values.std()) if draws > 1 else 0.0


@reader
def composition_scores(model: LocalModel | Network, kind: str | Iterable[str] = KINDS,
                       receivers: Iterable[tuple[int, int]] | None = None, draws: int = 20, seed: int = 0,
                       dtype: torch.dtype = torch.float64,
                       convention: str = DEFAULT_CONVENTION) -> pd.DataFrame:
    """Q-, K- and V-composition scores of every earlier head (sender) onto each receiver (default: every head from
    layer 1), from the weights of ``model`` (a loaded :class:`~probes.models.LocalModel` or a from-scratch network).
    One row per (sender, receiver, kind): ``sender_layer, sender_head, receiver_layer, receiver_head, kind, score,
    baseline_mean, baseline_sd, convention`` (the random baseline over ``draws`` draws; see the module docstring for
    the conventions and what is left out). ``dtype``: the arithmetic (float64 by default; float32 is about twice as
    fast). ``convention``: ``"raw"`` (the default: LayerNorm's centring left out) or ``"transformerlens"`` (folded in,
    as TransformerLens's defaults do; the same numbers on RMSNorm models; BadOption on BERT)."""
    kinds = parse_kinds(kind)
    convention = parse_convention(convention)
    if draws < 2:
        raise BadOption(f"draws={draws}: the baseline's spread needs 2 draws or more (20 by default)")
    maps = HeadMaps(network(model), dtype, convention)
    if receivers is None:
        receivers = [(lay, h) for lay in range(1, maps.n_layers) for h in range(maps.n_heads)]
    else:
        receivers = [check_receiver((int(lay), int(h)), maps.n_layers, maps.n_heads) for lay, h in receivers]
    if not receivers:
        raise BadOption("no receivers: the model has one layer, so no head has an earlier head to compose with")
    mean, sd = random_baseline(maps.width, maps.d, draws, seed, dtype)
    frame = pd.concat([scores(maps, k, receivers) for k in kinds], ignore_index=True)
    frame["baseline_mean"], frame["baseline_sd"] = mean, sd
    frame["convention"] = convention
    return frame


@reader
def notes(model: LocalModel | Network, convention: str = DEFAULT_CONVENTION) -> list[str]:
    """What a reader of the scores should know about this model's in ``convention`` (for the CLI and the app)."""
    rotary = getattr(getattr(model, "family", None), "positions", "absolute") == "rotary"
    centred = parse_convention(convention) != "raw" and centring(network(model), convention)  # raw reads no weights
    return [NOTE_CENTRED if centred else NOTE] + ([ROTARY_NOTE] if rotary else [])
