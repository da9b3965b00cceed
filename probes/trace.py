"""The Trace: everything attention did on one batch of inputs, from either path.

Hugging Face and the from-scratch forward pass both produce a :class:`Trace`, so parity is a
comparison of two values, the probes never care where attention came from, and the dashboard can
show either. Shapes (B = batch, H = heads, L = padded length, d = head width, D = model width):

* ``hidden_states``: ``n_layers + 1`` tensors ``[B, L, D]``: the embeddings, then the output of
  each block. As in Hugging Face, the last entry is the *final* hidden state, i.e. after GPT-2's
  closing LayerNorm;
* attention, held one of two ways:

  - **materialised** (Hugging Face, scratch ``eager``): ``attn`` per layer ``[B, H, L, L]``, row =
    query, column = key, and ``q``, ``k``, ``v`` per layer ``[B, H, L, d]`` (k and v ``[B, H_kv, L, d]``
    in a grouped-query model: query head h reads key/value head h // (H / H_kv)); for rotary models
    q and k are the rotated ones, and ``rotary`` holds the (cos, sin) tables they were turned by;
  - **lazy** (scratch ``sdpa`` / ``flash``): only ``lse``, the logsumexp of each query row's scaled
    scores, per layer ``[B, H, L]``. A layer's q, k and v are one linear map away from its input
    hidden state, so they are recomputed when asked for (``qkv_of``), and any head's probabilities
    come back exactly as P = exp(q·kᵀ·scale − lse), a block of rows at a time. Nothing of size
    layers × heads × L² is ever held;
* ``logits``: ``[B, L, vocab]`` where the model has a language-model head (and it was asked for);
* the rule of each layer's scores: ``scales`` (what q·kᵀ is multiplied by, 1/√d_k or a family's
  variant) and ``windows`` (a sliding window, or None), so a reader never needs the model to redo a
  row by hand.

The activations have two records here: :class:`Trace` (a forward pass) and :class:`GenerationTrace`
(``probes.scratch.generate``: per step only the new token's attention row of every layer and head, never a
full L×L per step); an edited pass of ``probes.effects`` is a :class:`probes.scratch.Ran` (what its hook points
kept, no attention unless asked).

Ask for attention through :meth:`Trace.attention` (one head or one layer, padding removed) or
:meth:`Trace.head_summary` (streaming statistics of every head of a layer), never by indexing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .attention_math import in_window, repeat_kv, soft_cap
from .head_index import check_index, check_layer_head
from .precision import upcast, working_dtype
from .tokens import Token

Rotary = tuple[torch.Tensor, torch.Tensor]  # cos, sin of rotary models
ROW_BLOCK = 256  # query rows recovered at a time from the logsumexp


class TokensAndRules:
    """What a trace answers from its tokens, mask and layer rules alone: shared by :class:`Trace` and by
    :class:`probes.remote.RemoteTrace` (which holds those here and reads every number from its server). A class
    using it has ``tokens``, ``input_ids``, ``attention_mask``, ``windows``, ``n_kv_heads``, ``n_layers`` and
    ``n_heads``."""

    tokens: list[list[Token]]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    windows: list[int | None] | None
    n_kv_heads: int | None

    is_causal: bool

    if TYPE_CHECKING:  # a Trace's field; a RemoteTrace reads it from its server
        @property
        def rotary(self) -> Rotary | list[Rotary] | None: ...

    if TYPE_CHECKING:  # a Trace's properties (from its tensors), facts a RemoteTrace is sent; its attention
        @property
        def n_layers(self) -> int: ...

        @property
        def n_heads(self) -> int: ...

        def all_attention(self, item: int = 0) -> torch.Tensor: ...

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]

    def window(self, layer: int) -> int | None:
        return self.windows[layer] if self.windows else None

    def rotary_of(self, layer: int) -> Rotary | None:
        """The (cos, sin) tables layer ``layer`` turned its q and k by (None: not a rotary model): the trace's one
        pair, or that layer's where the layers differ (a list, one pair per layer)."""
        rotary = self.rotary
        return rotary[layer] if isinstance(rotary, list) else rotary

    @property
    def group(self) -> int:
        """How many query heads read each key/value head (1 unless the model uses grouped-query attention)."""
        return self.n_heads // self.n_kv_heads if self.n_kv_heads else 1

    def kv_head(self, layer: int, head: int) -> int:
        """The key/value head that query head ``head`` reads (itself, unless the model groups its queries)."""
        self.check(layer, head)
        return head // self.group

    def valid(self, item: int) -> torch.Tensor:
        """The positions of item ``item``'s real tokens (padding left out), checked to be an item of the batch."""
        check_index(item, self.batch_size, "item", f"the batch of {self.batch_size}")
        return self.attention_mask[item].nonzero().squeeze(-1)

    def check(self, layer: int, head: int | None) -> None:
        """``layer`` (and ``head``, unless None) inside the trace, else :class:`~probes.errors.OutOfRange`."""
        check_layer_head(layer, head, self.n_layers, self.n_heads, "the trace")

    def real_tokens(self, item: int = 0) -> list[Token]:
        """The real tokens of one item (padding removed), in the order ``attention`` indexes them."""
        return [self.tokens[item][i] for i in self.valid(item).tolist()]

    def token_strings(self, item: int = 0) -> list[str]:
        """Readable strings of the real tokens of one item (padding removed)."""
        return [t.text for t in self.real_tokens(item)]


@dataclass
class Trace(TokensAndRules):
    source: str  # "hf", "scratch/eager", "scratch/sdpa", "scratch/flash"
    model: str
    tokens: list[list[Token]]  # readable tokens for each item of the batch (padding included)
    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L] bool: True for real tokens
    is_causal: bool
    hidden_states: list[torch.Tensor]
    attn: list[torch.Tensor] | None = None  # materialised probabilities
    q: list[torch.Tensor] | None = None
    k: list[torch.Tensor] | None = None
    v: list[torch.Tensor] | None = None
    logits: torch.Tensor | None = None
    lse: list[torch.Tensor] | None = None  # lazy: [B, H, L] per layer, natural log
    scales: list[float] | None = None  # the score scale of each layer (1/√d_k, or GPT-2's variants)
    # the sliding window of each layer (None: none; w: keys fewer than w positions away, attention_math.in_window)
    windows: list[int | None] | None = None
    softcaps: list[float | None] | None = None  # each layer's logit soft-cap (Gemma 2; None: none, or no record)
    # cos, sin [1 or B, L, d] of rotary models: one pair for every layer, or a list of each layer's pairs where the
    # layers turn by different angles (ModernBERT, Gemma 3: another table on their local layers); read through
    # rotary_of(layer)
    rotary: Rotary | list[Rotary] | None = None
    n_kv_heads: int | None = None  # key/value heads, when fewer than the query heads (grouped-query)
    qkv_of: Callable[[int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
    backend: str = ""  # the kernel that actually ran, e.g. "eager", "sdpa:flash_attention", "flash"
    note: str = ""  # why it is not the backend that was asked for, or why it is lazy, if so
    home = None  # held here, in this process (probes.seam.TraceLike; a RemoteTrace says its server)

    @property
    def lazy(self) -> bool:
        return self.attn is None

    @property
    def nbytes(self) -> int:
        """The memory its tensors hold, each storage counted once (a view of q, k and v shares one buffer): what
        keeping this trace costs a server that caches it."""
        held = [self.input_ids, self.attention_mask, *self.hidden_states, self.logits,
                *(t for group in (self.attn, self.q, self.k, self.v, self.lse) for t in group or ()),
                *(t for layer in range(self.n_layers) for t in self.rotary_of(layer) or ())]
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in held if t is not None}
        return sum(storages.values())

    @property
    def n_layers(self) -> int:
        return len(self.hidden_states) - 1

    @property
    def n_heads(self) -> int:
        held = self.attn if self.attn is not None else self.lse
        assert held is not None, "a trace holds its probabilities or their logsumexp"
        return held[0].shape[1]

    # -- q, k, v -------------------------------------------------------------------------------
    def layer_qkv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of every head of one layer, ``[B, H, L, d]`` each (recomputed for a lazy trace)."""
        self.check(layer, None)
        if self.q is not None and self.k is not None and self.v is not None:
            return self.q[layer], self.k[layer], self.v[layer]
        if self.qkv_of is None:
            raise ValueError(f"this trace ({self.source}) does not hold q, k and v")
        with torch.inference_mode():
            return self.qkv_of(layer)

    def qkv(self, layer: int, head: int, item: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of one head ``[n, d]`` over the real tokens of one item (k and v of the key/value head
        it reads, in a grouped-query model; q and k rotated, in a rotary one)."""
        self.check(layer, head)
        idx = self.valid(item)
        q, k, v = self.layer_qkv(layer)
        kv = self.kv_head(layer, head)
        return q[item, head][idx], k[item, kv][idx], v[item, kv][idx]

    # -- attention -----------------------------------------------------------------------------
    def _recover(self, layer: int, item: int, heads: slice | int, rows: torch.Tensor, idx: torch.Tensor,
                 qk: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Probabilities of the given query rows (positions in the padded sequence) over the real keys
        ``idx``, recovered from the layer's q, k (``qk``) and the logsumexp: ``[h, r, n]``."""
        q, k = qk[0], qk[1]
        k = k[item, heads // self.group] if isinstance(heads, int) else repeat_kv(k[item], self.group)[heads]
        q = q[item, heads][..., rows, :]
        k = k[..., idx, :]
        assert self.lse is not None and self.scales is not None, "a lazy trace keeps its logsumexp and scales"
        lse = self.lse[layer][item, heads][..., rows]
        scores = (upcast(q) @ upcast(k).transpose(-2, -1)).mul_(self.scales[layer])  # q·kᵀ ÷ √d_k
        scores = soft_cap(scores, self.softcaps[layer] if self.softcaps else None)  # Gemma 2: cap·tanh(s / cap)
        probs = torch.exp_(scores.sub_(lse[..., None]))  # exp(score − logsumexp) = softmax, exactly
        if self.is_causal:
            probs.masked_fill_(idx[None, :] > rows[:, None], 0.0)  # the future stays at zero
        if (window := self.window(layer)) is not None:  # outside the sliding window (both sides in an encoder)
            probs.masked_fill_(~in_window(rows[:, None], idx[None, :], window), 0.0)
        return probs

    def attention(self, layer: int, head: int | None = None, item: int = 0,
                  rows: slice | list[int] | None = None) -> torch.Tensor:
        """Attention probabilities of one head ``[r, n]`` (or all heads ``[H, r, n]``) of one batch item,
        over its n real tokens (padding removed). Row = query token, column = key token. ``rows``
        picks query rows among the real tokens (default: all). A lazy trace recomputes them from
        the logsumexp, in blocks of rows."""
        self.check(layer, head)
        idx = self.valid(item)
        picked = idx[rows] if rows is not None else idx
        if picked.ndim == 0:
            picked = picked[None]
        heads = slice(None) if head is None else head
        if self.attn is not None:  # not lazy
            a = self.attn[layer][item, heads]
            return a[..., picked, :][..., idx]
        qk = self.layer_qkv(layer)
        with torch.inference_mode():
            blocks = [self._recover(layer, item, heads, picked[i:i + ROW_BLOCK], idx, qk)
                      for i in range(0, len(picked), ROW_BLOCK)]
        return torch.cat(blocks, dim=-2)

    def all_attention(self, item: int = 0) -> torch.Tensor:
        """Every layer and head of one item over its real tokens, ``[layers, heads, n, n]``, on the CPU
        (what the probes score)."""
        return torch.stack([self.attention(layer, item=item) for layer in range(self.n_layers)]).cpu()

    def layer_attention(self, layer: int) -> torch.Tensor:
        """All heads of one layer for the whole batch, ``[B, H, L, L]`` (padding included; its rows and
        columns are not meaningful). Materialises L² per head: for parity on modest inputs."""
        if self.attn is not None:  # not lazy
            return self.attn[layer]
        assert self.lse is not None, "a lazy trace keeps its logsumexp"
        b, h, n = self.lse[layer].shape
        out = torch.zeros(b, h, n, n, dtype=self.lse[layer].dtype, device=self.lse[layer].device)
        for item in range(b):
            idx = self.valid(item)
            out[item][:, idx[:, None], idx[None, :]] = self.attention(layer, item=item)
        return out

    def head_summary(self, layer: int, item: int = 0, block: int = ROW_BLOCK) -> dict[str, torch.Tensor]:
        """Per-head statistics of one layer, over the real tokens of one item, computed in a streaming
        pass over blocks of query rows (never L×L for all heads at once):

        * ``entropy`` ``[H, n]``: entropy (nats) of each query row;
        * ``received`` ``[H, n]``: attention each key receives, summed over query rows;
        * ``previous`` ``[H, n]``: mass each query puts on the token just before it (0 for the first);
        * ``argmax`` ``[H, n]``: the most attended key of each query row.
        """
        self.check(layer, None)
        n = len(self.valid(item))
        h = self.n_heads
        dev = self.attention_mask.device
        dtype = working_dtype(self.hidden_states[0].dtype)
        entropy, previous, received = (torch.zeros(h, n, dtype=dtype, device=dev) for _ in range(3))
        argmax = torch.zeros(h, n, dtype=torch.long, device=dev)
        for start in range(0, n, block):
            rows = slice(start, min(n, start + block))
            p = upcast(self.attention(layer, None, item, rows))  # [H, r, n]
            entropy[:, rows] = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
            received += p.sum(1)
            argmax[:, rows] = p.argmax(-1)
            r = torch.arange(rows.start, rows.stop, device=dev)  # query positions among the real tokens
            local = (r > 0).nonzero().squeeze(-1)  # rows that have a previous token
            previous[:, r[local]] = p[:, local, r[local] - 1]
        return dict(entropy=entropy, received=received, previous=previous, argmax=argmax)


@dataclass
class GenerationTrace:
    """What attention did while a decoder wrote text one token at a time (``probes.scratch.generate``).

    Step ``s`` fed the token at position ``prompt_length − 1 + s`` (the prompt's last token for step 0,
    else the token step ``s − 1`` wrote) and wrote token ``prompt_length + s``. For each step it keeps
    only that query token's attention row over its context, per layer and head (``rows[s]``:
    ``[layers, H, prompt_length + s]``, zero outside a sliding window), never a full L×L, and the
    step's ``logits`` over the vocabulary. ``cache_bytes[s]`` is what the KV cache held after the step;
    ``cache_bytes_mha[s]`` what it would hold if every query head had its own key/value head.
    """

    model: str
    tokens: list[Token]  # the whole sequence: prompt, then the generated tokens
    input_ids: torch.Tensor  # [L] the whole sequence
    prompt_length: int
    rows: list[torch.Tensor]  # per step [layers, H, context]
    logits: torch.Tensor  # [steps, vocab]
    cache_bytes: list[int]
    cache_bytes_mha: list[int]
    step_seconds: list[float]  # wall time of each step (step 0: the prefill of the whole prompt)
    windows: list[int | None]
    n_kv_heads: int
    stopped: str = "length"  # "length" (max new tokens) or "eos" (the model wrote its end-of-text token)
    source: str = "scratch/kv-cache"
    backend: str = "eager"  # the attention of each step: eager, or the flash kernel
    note: str = ""  # why it is not the backend that was asked for, if it is not

    @property
    def n_steps(self) -> int:
        return len(self.rows)

    @property
    def n_layers(self) -> int:
        return self.rows[0].shape[0]

    @property
    def n_heads(self) -> int:
        return self.rows[0].shape[1]

    @property
    def new_ids(self) -> list[int]:
        return self.input_ids[self.prompt_length:].tolist()

    def _check(self, step: int, layer: int, head: int | None) -> None:
        check_index(step, self.n_steps, "step", "the generation's steps")
        check_layer_head(layer, head, self.n_layers, self.n_heads, "the trace")

    def query_position(self, step: int) -> int:
        """Position of the token step ``step`` fed in (the one whose attention row it holds)."""
        return self.prompt_length - 1 + step

    def row(self, step: int, layer: int, head: int | None = None) -> torch.Tensor:
        """The fed token's attention over positions 0..query of one head ``[context]`` (all heads:
        ``[H, context]``)."""
        self._check(step, layer, head)
        r = self.rows[step][layer]
        return r if head is None else r[head]

    def rows_matrix(self, layer: int, head: int) -> torch.Tensor:
        """Every step's row of one head side by side, ``[steps, positions]`` (zero for keys a step could not
        see yet): the lower band of the full attention matrix that generation computed."""
        self._check(0, layer, head)
        out = torch.zeros(self.n_steps, self.prompt_length - 1 + self.n_steps)
        for s, r in enumerate(self.rows):
            out[s, : r.shape[-1]] = r[layer, head]
        return out

    def top_keys(self, step: int, layer: int, head: int, k: int = 3) -> list[tuple[int, str, float]]:
        """The ``k`` most attended context tokens of one head at one step: (position, token, weight)."""
        r = self.row(step, layer, head)
        weights, positions = r.topk(min(k, r.numel()))
        return [(int(p), self.tokens[int(p)].text, float(w)) for w, p in zip(weights, positions, strict=True)]

    def frame(self, layer: int, head: int):
        """One head's rows as a tidy table: step, query, query_token, key, key_token, weight (keys 0..query of
        each step; 0 outside a sliding window), for pandas and altair."""
        import pandas as pd

        out = []
        for s in range(self.n_steps):
            q = self.query_position(s)
            r = self.row(s, layer, head)
            for key in range(r.numel()):
                out.append((s, q, self.tokens[q].text, key, self.tokens[key].text, float(r[key])))
        return pd.DataFrame(out, columns=["step", "query", "query_token", "key", "key_token", "weight"])
