"""The activation functions GPT-2 and BERT checkpoints name in their configs, written out.

A name not in :data:`ACTIVATIONS` is refused (``UnsupportedModel``), never replaced by a near miss.
Each is applied to a fresh tensor (the output of the layer before it), which it may overwrite.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def gelu(x):  # exact: x·Φ(x), Φ the standard normal CDF (BERT)
    return F.gelu(x)


def gelu_new(x):  # tanh approximation (GPT-2, "gelu_new" in configs)
    # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), evaluated in place: the same floating-point
    # operations as Hugging Face's NewGELUActivation, with one temporary instead of six (out of place when
    # autograd records the pass: the in-place steps would overwrite what the backward pass reads)
    if torch.is_grad_enabled():
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    inner = torch.pow(x, 3.0).mul_(0.044715).add_(x).mul_(math.sqrt(2.0 / math.pi))
    return inner.tanh_().add_(1.0).mul_(x.mul_(0.5))


def gelu_pytorch_tanh(x):  # the same approximation, fused by PyTorch
    return F.gelu(x, approximate="tanh")


def gelu_fast(x):
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def gelu_python(x):
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


ACTIVATIONS = {
    "gelu": gelu,
    "gelu_new": gelu_new,
    "gelu_pytorch_tanh": gelu_pytorch_tanh,
    "gelu_fast": gelu_fast,
    "gelu_python": gelu_python,
    "quick_gelu": quick_gelu,
    "relu": torch.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}
