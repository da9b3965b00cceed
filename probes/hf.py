"""The Hugging Face forward pass (eager, fp32) as a Trace producer: the reference.

:func:`forward` has the signature of :func:`probes.scratch.forward`, so the two producers stand side
by side and the runner (``probes.runner``) calls either. The model's own eager attention returns the
probabilities (``output_attentions``); its q, k and v are caught by forward hooks that the model's
family record places (for rotary models: q and k after the model's own rotation), and the Trace
carries the family's score scale and sliding window of each layer, as the scratch Trace does. An
encoder-decoder model (T5, BART…) is seen through its encoder: the self-attention over the text.
"""

from __future__ import annotations

import torch

from .families import Capture
from .trace import Trace


def forward(model, enc, backend: str = "eager", logits: bool = True) -> Trace:
    """Run the Hugging Face model (eager, fp32) on an :class:`~probes.models.Encoding` and collect its
    Trace, q/k/v included where the family record says how to catch them. The reference path has
    one backend, ``eager``; ``logits=False`` leaves the logits out of the Trace."""
    if backend != "eager":
        raise ValueError(f"the Hugging Face reference runs eager attention only (asked for {backend!r})")
    enc = enc.to(model.device)
    kwargs = dict(input_ids=enc.input_ids, attention_mask=enc.attention_mask)
    if enc.token_type_ids is not None:
        kwargs["token_type_ids"] = enc.token_type_ids
    family, config = model.family, model.config
    with Capture() as cap, torch.inference_mode():
        if family:
            family.capture(model.hf, config, cap)
        # an encoder-decoder (T5, BART…): the encoder's self-attention over the text is the view
        module = model.hf.get_encoder() if getattr(config, "is_encoder_decoder", False) else model.hf
        out = module(**kwargs, output_attentions=True, output_hidden_states=True, return_dict=True)
    if not out.attentions or any(a is None for a in out.attentions):
        raise RuntimeError("Hugging Face returned no attention probabilities: the model is not eager")
    complete = len(cap.q) == model.n_layers
    layers = range(model.n_layers)
    return Trace(
        source="hf",
        model=model.name,
        tokens=enc.tokens,
        input_ids=enc.input_ids,
        attention_mask=enc.attention_mask.bool(),
        is_causal=model.is_causal,
        attn=list(out.attentions),
        hidden_states=list(out.hidden_states),
        q=cap.q if complete else None,
        k=cap.k if complete else None,
        v=cap.v if complete else None,
        logits=getattr(out, "logits", None) if logits and model.has_lm_head else None,
        scales=[family.scale(config, layer) for layer in layers] if family else None,
        windows=[family.window(config, layer) for layer in layers] if family else None,
        rotary=cap.rotary,
        n_kv_heads=model.n_kv_heads,
        backend="eager",
    )
