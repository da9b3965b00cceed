"""The Trace: everything attention did on one batch of inputs, from either path.

Hugging Face and the from-scratch forward pass both produce a :class:`Trace`, so parity is a
comparison of two values, the probes never care where attention came from, and the dashboard can
show either. Shapes (B = batch, H = heads, L = padded length, d = head width, D = model width):

* ``q``, ``k``, ``v``: per layer ``[B, H, L, d]`` (``None`` where a path cannot see them);
* ``attn``: per layer ``[B, H, L, L]``, row = query, column = key, each valid row sums to 1;
* ``hidden_states``: ``n_layers + 1`` tensors ``[B, L, D]``: the embeddings, then the output of
  each block. As in Hugging Face, the last entry is the *final* hidden state, i.e. after GPT-2's
  closing LayerNorm;
* ``logits``: ``[B, L, vocab]`` where the model has a language-model head, else ``None``.

Ask for attention through :meth:`Trace.attention`, which drops padding, rather than indexing
``attn`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tokens import Token


@dataclass
class Trace:
    source: str  # "hf" or "scratch/eager"
    model: str
    tokens: list[list[Token]]  # readable tokens for each item of the batch (padding included)
    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L] bool: True for real tokens
    is_causal: bool
    attn: list[torch.Tensor]
    hidden_states: list[torch.Tensor]
    q: list[torch.Tensor] | None = None
    k: list[torch.Tensor] | None = None
    v: list[torch.Tensor] | None = None
    logits: torch.Tensor | None = None

    @property
    def n_layers(self) -> int:
        return len(self.attn)

    @property
    def n_heads(self) -> int:
        return self.attn[0].shape[1]

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]

    def _valid(self, item: int) -> torch.Tensor:
        if not 0 <= item < self.batch_size:
            raise IndexError(f"item {item} is outside the batch of {self.batch_size}")
        return self.attention_mask[item].nonzero().squeeze(-1)

    def _check(self, layer: int, head: int | None) -> None:
        if not 0 <= layer < self.n_layers:
            raise IndexError(f"layer {layer} is outside 0..{self.n_layers - 1}")
        if head is not None and not 0 <= head < self.n_heads:
            raise IndexError(f"head {head} is outside 0..{self.n_heads - 1}")

    def attention(self, layer: int, head: int | None = None, item: int = 0) -> torch.Tensor:
        """Attention probabilities of one head ``[n, n]`` (or all heads ``[H, n, n]``) of one batch
        item, over its n real tokens (padding removed). Row = query token, column = key token."""
        self._check(layer, head)
        idx = self._valid(item)
        a = self.attn[layer][item]
        a = a[:, idx][:, :, idx]
        return a if head is None else a[head]

    def qkv(self, layer: int, head: int, item: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of one head ``[n, d]`` over the real tokens of one item."""
        self._check(layer, head)
        if self.q is None:
            raise ValueError(f"this trace ({self.source}) does not hold q, k and v")
        idx = self._valid(item)
        return tuple(t[layer][item, head][idx] for t in (self.q, self.k, self.v))

    def token_strings(self, item: int = 0) -> list[str]:
        """Readable strings of the real tokens of one item (padding removed)."""
        return [self.tokens[item][i].text for i in self._valid(item).tolist()]
