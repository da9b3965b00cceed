"""The effects tests' models: the planted GPT-2 (``planted.py``) and the tiny GPT-2, in float32 and float64."""

from __future__ import annotations

import pytest
import torch
from checkpoints import make_gpt2
from effects.planted import plant

from probes.models import load


@pytest.fixture(scope="session")
def copy_model(tmp_path_factory):
    path = make_gpt2(tmp_path_factory.mktemp("copy") / "gpt2", n_layer=1, n_head=4, n_embd=32)
    return plant(load(str(path)))


@pytest.fixture(scope="session")
def copy_model64(copy_model):
    """The planted model in float64 (a copy): where a test checks arithmetic, not fp32 rounding."""
    return copy_model.cast(torch.float64)


@pytest.fixture(scope="session")
def gpt2_model64(gpt2_model):
    """The tiny GPT-2 in float64 (a copy)."""
    return gpt2_model.cast(torch.float64)
