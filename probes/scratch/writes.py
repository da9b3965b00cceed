"""What each head writes into the residual stream, for the readers that split the attention's output by head (the
``attn.result`` hook point, the logit lens's heads, direct logit attribution, path patching, composition): z_h·W_O[h],
and where a family scales the attention's output after the projection (the post-attention norms of Gemma 2 and
OLMo 2) that scale, frozen at a pass. Below :mod:`probes.scratch.family` and :mod:`probes.scratch.hooks`, which
both read it."""

from __future__ import annotations

import torch


def write_scale(net, layer: int, z: torch.Tensor) -> torch.Tensor | None:
    """What multiplies each head's z_h·W_O[h] on its way into the residual stream, frozen at the pass whose head
    outputs are ``z`` ``[..., H, L, d]``: ``[..., L, D]``, or None where a head's write is z_h·W_O[h] itself (every
    family but Gemma 2 and OLMo 2, whose post-attention norms scale the attention's output: (1 + w) ÷ rms(Σ_h
    z_h·W_O[h]) for Gemma, w ÷ rms(Σ_h z_h·W_O[h] + b) for OLMo 2)."""
    fn = getattr(net, "attention_write_scale", None)
    return None if fn is None else fn(layer, z)


def head_writer(net, layer: int) -> torch.Tensor:
    """W_O ``[H, d, D]`` as a reader of the weights alone sees each head's write (composition scores): the output
    projection by head, with the gain of a post-attention norm (Gemma's 1 + w, OLMo 2's w) folded into its columns;
    that norm's scale depends on the input and is left out, as every norm's scale is."""
    w_o = net.head_out(layer)[0]
    gain = getattr(net, "attention_write_gain", None)
    return w_o if gain is None else w_o * gain(layer).to(w_o.dtype)


def head_writes(net, layer: int, z: torch.Tensor, frozen_at: torch.Tensor | None = None) -> torch.Tensor:
    """Each head's write into the residual stream, ``[..., H, L, D]`` from ``z`` ``[..., H, L, d]``: z_h·W_O[h]
    (no bias), times :func:`write_scale` frozen at ``frozen_at`` (the pass's own z; default ``z``) where the family
    has a post-attention norm, so that the heads' writes sum to what the attention added in that pass."""
    w_o, _b = net.head_out(layer)  # [H, d, D]
    raw = torch.einsum("...hld,hdD->...hlD", z, w_o.to(z.dtype))
    scale = write_scale(net, layer, z if frozen_at is None else frozen_at)
    return raw if scale is None else raw * scale.to(raw.dtype).unsqueeze(-3)


def refuse_final_softcap(net, feature: str) -> None:
    """Refuse ``feature``, which splits a logit into a sum, on a network whose final soft-cap (Gemma 2's
    ``final_logit_softcapping``: cap·tanh(logit / cap)) makes the logit no sum of parts."""
    if getattr(net, "logit_softcap", None) is not None:
        from ..errors import UnsupportedModel

        raise UnsupportedModel(
            f"{feature} splits a logit into a sum of parts; {getattr(net, 'title', 'this model')} soft-caps its "
            f"logits (final_logit_softcapping={net.logit_softcap}: cap·tanh(logit / cap)), which is no sum: it is "
            "refused where the cap is on")
