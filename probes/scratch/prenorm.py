"""The layer loop of a pre-norm decoder, written once: every decoder family (``probes.families.decoders()``: GPT-2,
Llama and the families built on it) supplies only its parts (embeddings, what a layer needs about positions, the
final norm) and its layers.

    x = embeddings(tokens)
    for each layer:   x = layer(x)           (x + attention(norm(x)), then x + MLP(norm(x)), inside the layer;
                                              GPT-NeoX's parallel residual: x + attention(norm(x)) + MLP(norm(x)))
    x = normed(x);  logits = x · lm_headᵀ    (the final norm)

BERT keeps its own loop: it is post-norm (each layer's output is already normalised, so there is no final
norm, no residual before it and its last layer's output is the last hidden state), its embeddings are
normalised too, it has no KV cache (``start``) and its masked-LM head is a small network, not one matrix.
The layers' own bodies stay in the family files: they share their shape but not their weights' layout
(Conv1D and LayerNorm against Linear, RMSNorm and rotation), and sharing them would add a method per step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention_math import soft_cap
from .family import QKV
from .hooks import Pass


def net_logits(net, x: torch.Tensor) -> torch.Tensor:
    """The logits of last hidden states ``x`` ``[..., D]`` (after the final norm): x·lm_headᵀ, then the network's
    final soft-cap, cap·tanh(logit / cap), where it has one (Gemma 2's ``final_logit_softcapping``)."""
    return soft_cap(F.linear(x, net.lm_head), getattr(net, "logit_softcap", None))


def added_parts(net, layer: int, inputs: list[torch.Tensor], z: list[torch.Tensor], positions: torch.Tensor,
                dtype: torch.dtype, parts: dict[str, torch.Tensor],
                biases: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """``parts`` (the embeddings' parts of layer ``layer``'s input at ``positions``, item 0) with what every earlier
    layer added to a stream that is only ever added to (a pre-norm one): each head's write z_h·W_O[h] (``net``'s
    ``head_out``), each MLP's output (what its layer added less its attention's write) and the output projections'
    biases, summed with ``biases`` (an embedding norm's), as "biases". Each ``[n, D]`` in ``dtype``."""
    at = lambda t: t[0, positions].to(dtype)  # noqa: E731 (item 0, the asked positions)
    for i in range(layer):
        w_o, b_o = net.head_out(i)
        writes = torch.einsum("hnd,hdD->hnD", z[i][0][:, positions].to(dtype), w_o.to(dtype))
        parts.update((f"head {i}.{h}", write) for h, write in enumerate(writes))
        attention = writes.sum(0)
        if b_o is not None:
            attention = attention + b_o.to(dtype)
            biases = b_o.to(dtype).expand_as(attention) if biases is None else biases + b_o.to(dtype)
        parts[f"MLP {i}"] = at(inputs[i + 1]) - at(inputs[i]) - attention
    if biases is not None:
        parts["biases"] = biases
    return parts


class PreNormDecoder:
    """A pre-norm decoder (a :class:`~probes.scratch.family.DecoderNetwork`): a subclass sets ``layers`` (each
    ``layer(x, via, *at, chunk)`` returning its output, calling ``via.attend(i, q, k, v, spec)`` for its attention and
    ``via.at("attn_out", i, …)``, ``via.at("mlp_out", i, …)`` on what it adds to x, and ``layer.qkv(x, *at)``),
    ``lm_head`` (``[V, D]`` or None) and defines :meth:`embeddings`, :meth:`normed`, ``head_out``, ``final_norm``
    and, where its layers need something about positions besides x, :meth:`at` (and :meth:`for_layer` where that
    differs by layer)."""

    causal = True
    layers: list
    lm_head: torch.Tensor | None
    logit_softcap: float | None = None  # Gemma 2: the logits become cap·tanh(logit / cap)

    def embeddings(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, start: int) -> torch.Tensor:
        """The input of the first layer ``[B, L, D]``, for tokens at positions start..start+L−1."""
        raise NotImplementedError

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` after the final norm."""
        raise NotImplementedError

    def embedding_parts(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                        positions: torch.Tensor) -> dict[str, torch.Tensor]:
        """The embeddings of item 0 at ``positions`` as named parts ``{name: [n, D]}`` (:meth:`residual_parts`)."""
        raise NotImplementedError

    def head_out(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Layer ``layer``'s output projection by head, ``W_O`` ``[H, d, D]``, and its bias ``[D]`` or None."""
        raise NotImplementedError

    def at(self, start: int, length: int, device: torch.device | str) -> tuple:
        """What every layer takes besides its input for positions start..start+length−1 (none here)."""
        return ()

    def for_layer(self, at: tuple, layer: int) -> tuple:
        """What layer ``layer`` takes of ``at`` (:meth:`at`'s result): all of it here; a network whose layers differ
        in their positions (Gemma 3: a rotary table per layer type) picks the layer's own."""
        return at

    def qkv(self, layer: int, x: torch.Tensor) -> QKV:
        """q, k, v of layer ``layer`` from its input ``x`` (what a lazy Trace recomputes)."""
        return self.layers[layer].qkv(x, *self.for_layer(self.at(0, x.shape[1], x.device), layer))

    def residual_parts(self, layer: int, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                       inputs: list[torch.Tensor], z: list[torch.Tensor], positions: torch.Tensor,
                       dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Layer ``layer``'s input at ``positions`` (item 0) as the sum of what wrote it, each ``[n, D]`` in ``dtype``:
        the embeddings, every earlier head's output z_h·W_O[h], every earlier MLP's output and the output
        projections' biases. A pre-norm stream is only ever added to, so an MLP's output is what its layer added
        less the attention's, whether the MLP read the stream after the attention's write or beside it (GPT-NeoX's
        parallel residual) (see :meth:`probes.scratch.family.SplitNetwork.residual_parts`)."""
        parts = {name: e.to(dtype) for name, e in self.embedding_parts(input_ids, token_type_ids, positions).items()}
        return added_parts(self, layer, inputs, z, positions, dtype, parts)

    @property
    def unembedding(self) -> torch.Tensor | None:
        return self.lm_head  # [V, D]

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 token_type_ids: torch.Tensor | None = None, *, via: Pass, logits: bool = True,
                 chunk: int | None = None, start: int = 0, resume: tuple[int, torch.Tensor] | None = None):
        # via: the pass (probes.scratch.hooks.Pass), whose points each step goes through: via.at(point, layer, x)
        # start > 0 when decoding after a KV cache; padding is on the right
        at = self.at(start, input_ids.shape[1], input_ids.device)
        # resume=(i, x): start at layer i from its input x (edited copies share the layers before an edit)
        if resume is None:
            first, x = 0, via.at("embed", None, self.embeddings(input_ids, token_type_ids, start))
        else:
            first, x = resume
        for i, layer in enumerate(self.layers[first:], start=first):
            x = via.at("resid_pre", i, x)
            # the last one: the residual before the final norm
            x = via.at("resid_post", i, layer(x, via, *self.for_layer(at, i), chunk))
        x = via.at("final", None, self.normed(x))  # as in Hugging Face, the last hidden state is after the final norm
        if not logits or self.lm_head is None:
            return None
        return via.at("logits", None, net_logits(self, x))  # a score per token (soft-capped: Gemma 2)
