"""Our own forward pass: GPT-2 and BERT written from scratch in torch.

Nothing here calls transformers' modeling code; it only reads the weights of the Hugging Face
module (``model.hf.state_dict()``) and the config. :func:`forward` returns the same
:class:`~probes.trace.Trace` as the Hugging Face path, so the two can be compared head by head.

Backends (``attention.py``): ``eager`` materialises every probability; ``sdpa`` and ``flash`` keep
only the logsumexp per query row and give a lazy Trace, which recovers any head on demand. Where
``flash`` cannot run (no CUDA), ``sdpa`` runs and the Trace's ``note`` says so.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedModel
from ..trace import Trace
from . import bert, flash, gpt2
from .attention import BACKENDS, allowed_keys, sdpa_attention
from .attention import attention as eager_attention  # keeps `scratch.attention` the module

ARCHITECTURES = {"gpt2": gpt2.GPT2, "bert": bert.Bert}
SCALES = {"gpt2": gpt2.attention_scale, "bert": bert.attention_scale}
LAZY_CHUNK = 256  # the lazy backends run the MLP this many positions at a time (peak memory of long inputs)


def _check_family(model) -> None:
    if model.family not in ARCHITECTURES:
        kind = getattr(model.config, "model_type", "?")
        raise UnsupportedModel(
            f"{model.name!r} is a {kind!r} model: the from-scratch path covers the GPT-2 and BERT families; "
            "the Hugging Face view still works"
        )


def attention_scales(model) -> list[float]:
    """What each layer multiplies q·kᵀ by (1/√d_k, or GPT-2's config variants), read from the config:
    the same rule the from-scratch layers use, and the one Hugging Face applies."""
    _check_family(model)
    return [SCALES[model.family](model.config, layer) for layer in range(model.n_layers)]


def build(model):
    """The from-scratch network for a loaded :class:`~probes.models.Model` (built once, then cached)."""
    _check_family(model)
    cached = getattr(model, "_scratch", None)
    if cached is None:
        cached = ARCHITECTURES[model.family](model.hf.state_dict(), model.config, model.name)
        model._scratch = cached
    return cached


def resolve_backend(backend: str, device: torch.device | str = "cpu") -> tuple[str, str]:
    """The backend that will run for the one asked for, and a note when they differ."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if backend == "flash" and not (flash.available() and (torch.device(device).type == "cuda"
                                                           or flash.interpreting())):
        return "sdpa", "flash needs CUDA and Triton; ran sdpa instead (same attention, torch's fused kernel)"
    return backend, ""


def forward(model, enc, backend: str = "eager", logits: bool = True) -> Trace:
    """Run the from-scratch network on an :class:`~probes.models.Encoding` and return its Trace.

    ``eager`` keeps every probability; ``sdpa`` and ``flash`` keep the logsumexp and give a lazy Trace.
    Neither keeps q, k, v: the Trace recomputes a layer's from its input hidden state when asked.
    ``logits=False`` skips the language-model head (a long input's logits alone can take GBs)."""
    net = build(model)
    enc = enc.to(model.device)
    ran, note = resolve_backend(backend, enc.input_ids.device)
    mask = enc.attention_mask
    hidden: list[torch.Tensor] = []
    rec: dict[str, list] = {"attn": [], "lse": [], "scale": [], "kernel": []}

    def attend_eager(q, k, v, scale):
        out, probs = eager_attention(q, k, v, allowed, scale=scale)
        rec["attn"].append(probs)
        return out

    def attend_sdpa(q, k, v, scale):
        out, lse, kernel = sdpa_attention(q, k, v, mask, net.causal, scale)
        rec["lse"].append(lse)
        rec["scale"].append(scale)
        rec["kernel"].append(kernel)
        return out

    def attend_flash(q, k, v, scale):
        out, lse = flash.flash_attention(q, k, v, causal=net.causal, key_mask=mask, scale=scale)
        rec["lse"].append(lse)
        rec["scale"].append(scale)
        return out

    allowed = allowed_keys(mask, net.causal) if ran == "eager" else None
    attend = {"eager": attend_eager, "sdpa": attend_sdpa, "flash": attend_flash}[ran]
    with torch.inference_mode():
        out = net(enc.input_ids, mask, enc.token_type_ids, attend=attend, record=hidden.append, logits=logits,
                  chunk=None if ran == "eager" else LAZY_CHUNK)

    if ran == "sdpa":
        kernels = sorted(set(rec["kernel"]))
        ran_name = "sdpa:" + "+".join(kernels)
    else:
        ran_name = ran
    common = dict(source=f"scratch/{ran}", model=model.name, tokens=enc.tokens, input_ids=enc.input_ids,
                  attention_mask=mask.bool(), is_causal=net.causal, hidden_states=hidden, logits=out,
                  backend=ran_name, note=note)

    def qkv_of(layer: int):  # q, k, v are one linear map from a layer's input: recomputed, not kept
        return net.layers[layer].qkv(hidden[layer])

    if ran == "eager":
        return Trace(attn=rec["attn"], qkv_of=qkv_of, **common)
    return Trace(lse=rec["lse"], scales=rec["scale"], qkv_of=qkv_of, **common)
