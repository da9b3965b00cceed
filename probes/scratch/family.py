"""What one family file in ``probes/scratch/`` provides: its record (:class:`Family`), the type its Hugging Face
capture fills (:class:`Capture`), and its from-scratch network.

A :class:`Family` says everything the rest of the library needs to know about an architecture:
which ``config.model_type`` values it covers and which Hugging Face class loads it, how the Hugging
Face view captures each layer's q, k and v, the from-scratch network, the attention-scale rule,
whether it is causal, whether it takes token types and sentence pairs, how many key/value heads
it has, its head width, its position scheme and sliding window, and which config options its
from-scratch network implements or refuses.

The records are collected by :mod:`probes.families` (one floor up), which finds every module of this package
with a ``FAMILIES`` tuple.

What the rest of the library calls on a from-scratch network is written here once, as Protocols:
:class:`Network` (every family; its docstring is the checklist for a new family), :class:`DecoderNetwork`
(the decoders that write text: a final norm, a language-model head, positions after a KV cache) and
:class:`RotaryNetwork` (positions as rotations). ``tests/scratch/test_family.py`` holds every registered family to
them. The layer loop the pre-norm decoders share is :class:`probes.scratch.prenorm.PreNormDecoder`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from .writes import head_writer, head_writes, refuse_final_softcap, write_scale

if TYPE_CHECKING:
    from .hooks import Pass

__all__ = ["QKV", "Capture", "DecoderNetwork", "Family", "Network", "RotaryNetwork", "SplitNetwork", "head_writer",
           "head_writes", "refuse_final_softcap", "write_scale"]

QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # q [B, H, L, d], k and v [B, H_kv, L, d]
Config = Any  # a transformers config: which attributes it has depends on the family (num_attention_heads, …)


@runtime_checkable
class Network(Protocol):
    """What the library calls on a from-scratch network (:func:`probes.scratch.build`'s result): in
    ``probes.scratch`` (``forward``, ``run_with_hooks``), ``probes.scratch.generate`` and ``probes.effects``. Shapes:
    B items, L positions, D = hidden size, H query heads, H_kv key/value heads, d = head width, V = vocabulary.

    **Checklist for a new family** (one file ``probes/scratch/<family>.py``, nothing else names it):

    1. *The network class* (the record's ``network``), built as ``cls(state_dict, config, name)``, satisfying this
       Protocol; also :class:`DecoderNetwork` if it is a decoder with a language-model head (GPT-2, Llama: a
       pre-norm decoder can subclass :class:`~probes.scratch.prenorm.PreNormDecoder`, which runs the layer loop)
       and :class:`RotaryNetwork` if its positions are rotations (``Family.positions == "rotary"``).
    2. *Its weights*, taken from the Hugging Face state dict through
       :class:`~probes.scratch.weights.Weights` (``strip`` the base-model prefix, ``ignore_suffixes`` for
       buffers that carry no math) and closed with ``w.check_all_used(name)``, so a checkpoint with a weight the
       network would not use is refused by name.
    3. *``check(config, name)``*, called first by the network's constructor: raises
       :class:`~probes.errors.UnsupportedModel` naming every config option the network does not implement;
       ``refuse_at_load`` for options Hugging Face itself gets wrong; ``float64_refused`` where Hugging Face's
       code cannot run in float64.
    4. *``capture(hf, config, cap)``*: forward hooks on the Hugging Face module that fill the :class:`Capture`
       with each layer's q, k and v (rotated, and ``cap.rotary``, for rotary families).
    5. *The record*: a module-level ``FAMILIES = (Family(...),)`` with every field of :class:`Family` that
       differs from its default (``scale``, ``causal``, ``kv_heads``, ``head_dim``, ``window``, ``token_types``,
       ``pairs``, ``positions``, ``max_tokens``, ``implemented``/``refused`` for the docs' table, ``examples``).
    6. *Tests*: a tiny random checkpoint builder in ``tests/checkpoints.py`` and the family's ``Spec`` in
       ``tests/scratch/conformance.py`` (the builder, the options it varies, its flash options and the options
       it refuses): the conformance suite (``tests/scratch/test_conformance.py``) then checks parity with Hugging
       Face option by option (bit-identical in eager, the lazy backends, the float64 proof), the refusals by name
       and an unused weight refused, and ``tests/scratch/test_family.py`` holds it to these Protocols;
       ``tests/scratch/test_<family>.py`` keeps only what is peculiar to it. Its name in
       ``tests/test_families.py``; the docs' table (``probes.families.markdown_table()``, docs/models.md).
    """

    @property
    def causal(self) -> bool:
        """Whether a query sees only the past (what the Trace reports; each layer's ``Spec`` says it too)."""
        ...

    @property
    def layers(self) -> Sequence[object]:
        """The layers, in order: only their number is read outside the family file (``len(net.layers)``)."""
        ...

    def qkv(self, layer: int, x: torch.Tensor) -> QKV:
        """q ``[B, H, L, d]``, k and v ``[B, H_kv, L, d]`` of layer ``layer`` recomputed from its input ``x``
        ``[B, L, D]`` (as the pass recorded it): what a lazy Trace asks for. Rotary families return q and k
        rotated (what the scores are made of)."""
        ...

    def head_out(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Layer ``layer``'s attention output projection split by head: ``W_O`` ``[H, d, D]`` (head h writes
        z_h·W_O[h]) and the bias ``[D]`` added once for all heads (None where the model has none)."""
        ...

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 token_type_ids: torch.Tensor | None = None, *, via: Pass, logits: bool = True,
                 chunk: int | None = None, resume: tuple[int, torch.Tensor] | None = None) -> torch.Tensor | None:
        """One pass over ``input_ids`` ``[B, L]``; returns the logits ``[B, L, V]``, or None (``logits=False``,
        or no language-model head).

        ``attention_mask`` ``[B, L]`` (1: a token, 0: padding) is the caller's: the masking is ``via``'s attention's.
        ``token_type_ids`` ``[B, L]`` or None: BERT's segments (GPT-2 adds their token embeddings; rotary families
        ignore them). ``via`` is the pass (:class:`probes.scratch.hooks.Pass`), and the network reaches every hook
        point through it, in this order: ``via.at("embed", None, x)``; for each layer i, ``via.at("resid_pre", i,
        x)``, ``via.attend(i, q, k, v, spec)`` (q ``[B, H, L, d]``, k and v ``[B, H_kv, L, d]``, ``spec`` the
        layer's :class:`~probes.attention_math.Spec`; returns the head outputs z ``[B, H, L, d]`` the layer goes on
        with), ``via.at("attn_out", i, …)`` and ``via.at("mlp_out", i, …)`` on what the attention and the MLP add
        to the residual, ``via.at("resid_post", i, …)`` on the layer's output; then ``via.at("final", None, …)`` on
        the last hidden state (after the final norm where there is one) and ``via.at("logits", None, …)``. Each
        call returns the tensor the network goes on with (a hook's edit): edits (``probes.effects``) are made
        there, the network has no ``edit`` argument, and it never changes in place a tensor it handed to ``via``.
        ``chunk``: the MLP runs this many positions at a time (None: all at once). ``resume=(i, x)``: start at layer
        ``i`` from its input ``x`` ``[B, L, D]`` (no embeddings: the first point reached is layer i's resid_pre)."""
        ...


@runtime_checkable
class DecoderNetwork(Network, Protocol):
    """A decoder with a final norm and a language-model head (GPT-2 and the Llama-shaped ones): what generation
    (``probes.scratch.generate``: a KV cache, ``start``, ``lm_head``) and direct logit attribution
    (``probes.effects.attribution``: ``final_norm``, ``unembedding``) and the logit lens (``probes.effects.lens``:
    ``normed`` too) call besides :class:`Network`."""

    @property
    def lm_head(self) -> torch.Tensor | None:
        """The language-model head ``[V, D]`` (logits = last hidden state · lm_headᵀ; the embedding where they are
        tied), or None for a checkpoint without one (a bare Llama)."""
        ...

    @property
    def unembedding(self) -> torch.Tensor | None:
        """The same matrix as ``lm_head`` ``[V, D]`` (or None): its row t is token t's direction in the residual."""
        ...

    def final_norm(self, x: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor | None]:
        """The final norm with its scale frozen at ``x`` ``[..., D]`` (the residual before it): a linear map of any
        part c of the residual and the bias ``[D]`` (None: none), so that map(x) + bias is the normed x."""
        ...

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., D]`` after the final norm, as the pass applies it (the logit lens reads every layer's
        residual through it: for the last residual, normed(x)·lm_headᵀ is the model's logits)."""
        ...

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 token_type_ids: torch.Tensor | None = None, *, via: Pass, logits: bool = True,
                 chunk: int | None = None, start: int = 0,
                 resume: tuple[int, torch.Tensor] | None = None) -> torch.Tensor | None:
        """As :meth:`Network.__call__`, plus ``start``: the position of the first token of ``input_ids`` (> 0
        when decoding after a KV cache holding positions 0..start−1)."""
        ...


@runtime_checkable
class RotaryNetwork(Network, Protocol):
    """A network whose positions are rotations of q and k (``Family.positions == "rotary"``): the Trace keeps its
    tables (``probes.scratch.forward``), which explain a score (``probes.explain``)."""

    def rotary(self, length: int, device: torch.device | str = "cpu",
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of every position's angles in layer ``layer``, ``[1, length, r]`` each, in the network's
        working dtype: r = d, or fewer where a partial rotary turns only the first r numbers of a head (Phi-3's
        ``partial_rotary_factor``). The same tables in every layer, but where the layers turn by different angles
        (ModernBERT, Gemma 3: a table per layer type)."""
        ...


@runtime_checkable
class SplitNetwork(Network, Protocol):
    """A network whose attention scores can be split into what wrote the query and the key (every family here):
    what QK attribution (``probes.effects.why``) and composition scores (``probes.effects.compose``: ``head_weights``)
    call besides :class:`Network`. ``residual_parts`` and ``qk_parts`` work on a few
    positions of item 0, in the ``dtype`` asked (float64 for the attribution), and are exact: the parts sum back
    to the pass's own numbers up to rounding."""

    def residual_parts(self, layer: int, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                       inputs: list[torch.Tensor], z: list[torch.Tensor], positions: torch.Tensor,
                       dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Layer ``layer``'s input at ``positions`` (``[n]`` indices) as named parts ``{name: [n, D]}`` whose sum is
        ``inputs[layer][0, positions]``: the embeddings (``"token embedding"``, ``"position embedding"``, …), each
        earlier head's output (``"head i.h"``), each earlier MLP's (``"MLP i"``) and the biases (``"biases"``),
        every norm on the way linearised by freezing its scale at its value in this pass. ``inputs`` and ``z`` are
        a pass's layer inputs and head outputs (:func:`probes.scratch.run_with_hooks` keeping ``resid_pre`` and
        ``attn.z``)."""
        ...

    def qk_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor, positions: torch.Tensor,
                 length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """q ``[P + 1, H, n, d]`` and k ``[P + 1, H_kv, n, d]`` of layer ``layer`` for each of ``parts``
        ``[P, n, D]`` (the residual parts at ``positions``, summing to the layer's input ``x`` ``[n, D]`` there):
        the norm before the layer's attention frozen at ``x``, the projections without their biases, a norm of each
        head's q and k (Qwen3's QK-norm) frozen at the whole q and k there, rotary families turning each part by its
        position (``length``: the input's, which dynamic rotary scaling reads).
        Entry P is the constant: q and k of an all-zero stream (the norm's bias and the projections' biases). The
        sum over the P + 1 entries is the layer's own q and k there."""
        ...

    def head_weights(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s query, key and value maps by head, read from the weights alone: ``W_Q`` ``[H, D, d]``,
        ``W_K`` and ``W_V`` ``[H_kv, D, d]`` (a residual row x gives head h's q as x·W_Q[h]), the gain of the norm the
        attention reads through folded into their rows (and a gain on each head's q and k, Qwen3's QK-norm, into W_Q's
        and W_K's columns); no biases, no norm centring or scale (QK-norm's neither), no rotation (what composition
        scores, :mod:`probes.effects.compose`, are made of)."""
        ...


class Capture:
    """Each layer's q, k and v, split into heads (``[B, H, L, d]``, k and v ``[B, H_kv, L, d]``), as a
    Hugging Face forward pass computes them, gathered by forward hooks; for rotary models q and k
    are the rotated ones (what the scores are made of), and ``rotary`` holds the (cos, sin) tables
    the model used (``[1 or B, L, d]``; a list of each layer's pair where the layers' angles differ)."""

    def __init__(self):
        self.q: list[torch.Tensor] = []
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        # one (cos, sin) pair for every layer, or each layer's pair where they differ (ModernBERT, Gemma 3)
        self.rotary: tuple[torch.Tensor, torch.Tensor] | list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.hooks: list = []
        self.thread = threading.get_ident()  # the thread whose pass this catches

    def hook(self, module: torch.nn.Module, fn: Callable, with_kwargs: bool = False) -> None:
        """Register ``fn`` as a forward hook of ``module`` (removed on exit) that catches this thread's pass only.
        A server runs one model in several threads at once, one per visitor, and every pass goes through the same
        modules, so a hook that caught every pass would hand one visitor another's q, k and v."""
        def mine(*args):
            if threading.get_ident() == self.thread:
                return fn(*args)
            return None

        self.hooks.append(module.register_forward_hook(mine, with_kwargs=with_kwargs))

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks = []


@dataclass(frozen=True)
class Family:
    name: str  # short name, e.g. "llama"
    title: str  # for people, e.g. "Llama"
    model_types: tuple[str, ...]  # the config.model_type values it covers
    hf_class: Callable[[Config], str]  # config -> name of the transformers class that loads it
    network: Callable[[dict[str, torch.Tensor], Config, str], Network]  # (state_dict, config, name) -> the net
    check: Callable[[Config, str], None]  # raises UnsupportedModel naming an option the network lacks
    capture: Callable[[torch.nn.Module, Config, Capture], None]  # registers the q/k/v hooks on the HF module
    scale: Callable[[Config, int], float]  # (config, layer) -> what q·kᵀ is multiplied by
    causal: Callable[[Config], bool] = lambda config: True
    kv_heads: Callable[[Config], int] = lambda config: config.num_attention_heads
    head_dim: Callable[[Config], int] = lambda config: config.hidden_size // config.num_attention_heads
    # sliding window of a layer: keys fewer than w positions away (attention_math.in_window; both sides in an encoder)
    window: Callable[[Config, int], int | None] = lambda config, layer: None
    softcap: Callable[[Config, int], float | None] = lambda config, layer: None  # logit soft-cap of a layer (Gemma 2)
    token_types: bool = False  # takes token_type_ids (BERT segments)
    pairs: bool = False  # takes a second sentence
    positions: str = "absolute"  # "absolute" (learned table) or "rotary"
    # the longest input its positions allow (None: the config's n_positions or max_position_embeddings)
    max_tokens: Callable[[Config], int | None] = lambda config: None
    refuse_at_load: Callable[[Config, str], None] | None = None  # options even the HF view gets wrong
    # why Hugging Face's code for this config cannot run in float64 (None: it can), for the float64 proof
    float64_refused: Callable[[Config], str | None] = lambda config: None
    implemented: str = ""  # docs/models.md: the config options the network implements
    refused: str = ""  # docs/models.md: the ones it refuses by name
    examples: tuple[str, ...] = field(default=())  # hub ids, for the model menu and docs/models.md
