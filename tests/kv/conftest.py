import pytest
import torch

import probes


@pytest.fixture(scope="session", params=["llama", "gpt2"])
def decoder(request, llama_dir, gpt2_dir):
    """Both tiny decoders: Llama (rotary, 6 query heads reading 2 key/value heads) and GPT-2 (learned positions, a
    key/value head per query head)."""
    return probes.load(str(llama_dir if request.param == "llama" else gpt2_dir))


@pytest.fixture(scope="session")
def ids(decoder):
    """40 random tokens (the tiny models read 64)."""
    return torch.randint(0, decoder.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
