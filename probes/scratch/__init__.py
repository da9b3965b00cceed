"""Our own forward pass: GPT-2 and BERT written from scratch in torch.

Nothing here calls transformers' modeling code; it only reads the weights of the Hugging Face
module (``model.hf.state_dict()``) and the config. :func:`forward` returns the same
:class:`~probes.trace.Trace` as the Hugging Face path, so the two can be compared head by head.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedModel
from ..trace import Trace
from .attention import BACKENDS
from .bert import Bert
from .gpt2 import GPT2

ARCHITECTURES = {"gpt2": GPT2, "bert": Bert}


def build(model):
    """The from-scratch network for a loaded :class:`~probes.models.Model` (built once, then cached)."""
    if model.family not in ARCHITECTURES:
        kind = getattr(model.config, "model_type", "?")
        raise UnsupportedModel(
            f"{model.name!r} is a {kind!r} model: the from-scratch path covers the GPT-2 and BERT families; "
            "the Hugging Face view still works"
        )
    cached = getattr(model, "_scratch", None)
    if cached is None:
        cached = ARCHITECTURES[model.family](model.hf.state_dict(), model.config, model.name)
        model._scratch = cached
    return cached


def forward(model, enc, backend: str = "eager") -> Trace:
    """Run the from-scratch network on an :class:`~probes.models.Encoding` and return its Trace."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    net = build(model)
    rec: dict[str, list[torch.Tensor]] = {"q": [], "k": [], "v": [], "attn": [], "hidden": []}

    def record(**tensors):
        for key, value in tensors.items():
            rec[key].append(value)

    with torch.inference_mode():
        logits = net(enc.input_ids, enc.attention_mask, enc.token_type_ids, record=record)
    return Trace(
        source=f"scratch/{backend}",
        model=model.name,
        tokens=enc.tokens,
        input_ids=enc.input_ids,
        attention_mask=enc.attention_mask.bool(),
        is_causal=net.causal,
        attn=rec["attn"],
        hidden_states=rec["hidden"],
        q=rec["q"],
        k=rec["k"],
        v=rec["v"],
        logits=logits,
    )
