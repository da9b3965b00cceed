"""The Hugging Face forward pass (eager, fp32) as a Trace producer: the reference.

:func:`forward` has the signature of :func:`probes.scratch.forward`, so the two producers stand side
by side and the runner (``probes.runner``) calls either. The model's own eager attention returns the
probabilities (``output_attentions``); its q, k and v are caught by forward hooks that the model's
family record places (for rotary models: q and k after the model's own rotation), and the Trace
carries the family's score scale and sliding window of each layer, as the scratch Trace does. An
encoder-decoder model (T5, BART…) is seen through its encoder: the self-attention over the text.

**Bounded memory.** Hugging Face hands back every head's L×L probabilities (layers × heads × L² × 4
bytes: 1 GiB for SmolLM2 at 1,024 tokens, 4.2 GiB at 2,048). Given an ``attention_budget`` (bytes) that
they would exceed, and a family whose hooks catch q and k, the pass keeps only what a lazy scratch Trace
keeps: Hugging Face's own q, k and v and one logsumexp per query row, and any head's probabilities come
back as exp(q·kᵀ·scale − lse) from Hugging Face's q and k: the same numbers up to float32 rounding (a
few 1e-6 at most in the tests, under the parity tolerance of 1e-5; the Trace's note says so). Without a
budget (the default) every probability is kept, as before.

**float64.** A model cast to float64 (:meth:`probes.models.LocalModel.cast`) is the proof that our pass is the
same function as Hugging Face's. Some of Hugging Face's code pins a step to float32 whatever the model's
dtype (Llama's RMSNorm variance, its rotary angles, its eager softmax): those steps would round a float64
pass to float32 and hide any difference below ~1e-7. :class:`KeepFloat64` runs the same code with a float64
tensor never cast down to float32, so every step of the reference is float64.
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from .attention_math import Spec, attention_bytes, row_logsumexp
from .families import Capture
from .trace import Trace


class KeepFloat64(TorchFunctionMode):
    """Within it nothing becomes float32: ``.float()``, ``.to(torch.float32)``, ``.type(torch.float32)`` and a
    ``dtype=torch.float32`` argument (``softmax``'s, a buffer made with ``torch.empty``) give float64 instead;
    everything else runs as written."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.float:
            func = torch.Tensor.double
        elif func in (torch.Tensor.to, torch.Tensor.type):
            args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        if kwargs.get("dtype") is torch.float32:
            kwargs["dtype"] = torch.float64
        return func(*args, **kwargs)


def forward(model, enc, backend: str = "eager", logits: bool = True, attention_budget: int | None = None) -> Trace:
    """Run the Hugging Face model (eager, fp32) on an :class:`~probes.models.Encoding` and collect its
    Trace, q/k/v included where the family record says how to catch them. The reference path has
    one backend, ``eager``; ``logits=False`` leaves the logits out of the Trace. ``attention_budget``:
    above that many bytes of probabilities, keep a logsumexp per row instead (see the module's notes)."""
    if backend != "eager":
        raise ValueError(f"the Hugging Face reference runs eager attention only (asked for {backend!r})")
    enc = enc.to(model.device)
    kwargs = dict(input_ids=enc.input_ids, attention_mask=enc.attention_mask)
    if enc.token_type_ids is not None:
        kwargs["token_type_ids"] = enc.token_type_ids
    family, config = model.family, model.config
    size = attention_bytes(model, enc)
    # over the budget, and with the family's hooks (without them there is no q and k to recover from)
    lazy = attention_budget is not None and size > attention_budget and family is not None
    precise = KeepFloat64() if model.dtype == torch.float64 else contextlib.nullcontext()
    with Capture() as cap, torch.inference_mode(), precise:
        if family:
            family.capture(model.hf, config, cap)
        # an encoder-decoder (T5, BART…): the encoder's self-attention over the text is the view
        if getattr(config, "is_encoder_decoder", False):
            module = model.hf.get_encoder()
        else:  # without logits, the base model: the LM head's [B, L, vocab] would be computed for nothing
            module = model.hf if logits and model.has_lm_head else model.hf.base_model
        out = module(**kwargs, output_attentions=not lazy, output_hidden_states=True, return_dict=True)
    complete = len(cap.q) == model.n_layers
    layers = range(model.n_layers)
    scales = [family.scale(config, layer) for layer in layers] if family else None
    windows = [family.window(config, layer) for layer in layers] if family else None
    softcaps = [family.softcap(config, layer) for layer in layers] if family else None
    lse, note = None, ""
    if lazy:
        assert scales is not None and windows is not None and attention_budget is not None  # lazy: a family, a budget
        if not complete:
            raise RuntimeError(f"the {family.title} hooks caught q and k in {len(cap.q)} of {model.n_layers} layers")
        with torch.inference_mode():
            lse = [row_logsumexp(cap.q[i], cap.k[i], enc.attention_mask, Spec(scales[i], model.is_causal, windows[i],
                                                                                   softcaps[i] if softcaps else None))
                   for i in layers]
        note = (f"Hugging Face's probabilities of every head would take {size / 2**20:,.0f} MiB "
                f"at this length (over the {attention_budget / 2**20:,.0f} MiB kept): each head is recomputed from "
                "Hugging Face's own q and k and one logsumexp per row (equal to its softmax up to float32 rounding)")
    elif not out.attentions or any(a is None for a in out.attentions):
        raise RuntimeError("Hugging Face returned no attention probabilities: the model is not eager")
    return Trace(
        source="hf",
        model=model.name,
        tokens=enc.tokens,
        input_ids=enc.input_ids,
        attention_mask=enc.attention_mask.bool(),
        is_causal=model.is_causal,
        attn=None if lazy else list(out.attentions),
        lse=lse,
        hidden_states=list(out.hidden_states),
        q=cap.q if complete else None,
        k=cap.k if complete else None,
        v=cap.v if complete else None,
        logits=getattr(out, "logits", None) if logits and model.has_lm_head else None,
        scales=scales,
        softcaps=softcaps,
        windows=windows,
        rotary=cap.rotary,
        n_kv_heads=model.n_kv_heads,
        backend="eager",
        note=note,
    )
