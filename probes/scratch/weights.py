"""Taking weights out of a Hugging Face state dict, and noticing what was left behind.

A weight the from-scratch model did not use means the checkpoint computes something we do not
(relative position tables, cross-attention, adapters...): the model is refused rather than run
subtly wrong.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedModel


class Weights:
    def __init__(self, state_dict: dict[str, torch.Tensor], strip: str = "", ignore_suffixes: tuple[str, ...] = ()):
        """``strip`` is removed from the keys that start with it (e.g. ``"transformer."``); keys ending
        in ``ignore_suffixes`` are buffers that carry no math (old causal-mask tensors)."""
        self._tensors = {(k[len(strip):] if strip and k.startswith(strip) else k): v for k, v in state_dict.items()}
        self._ignore = ignore_suffixes
        self._used: set[str] = set()

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._tensors:
            raise UnsupportedModel(f"the checkpoint has no weight {key!r}, which the from-scratch model needs")
        self._used.add(key)
        return self._tensors[key].detach()

    def get(self, key: str) -> torch.Tensor | None:
        return self[key] if key in self._tensors else None

    def check_all_used(self, model_name: str) -> None:
        left = sorted(k for k in self._tensors if k not in self._used and not k.endswith(self._ignore))
        if left:
            shown = ", ".join(left[:5]) + (" ..." if len(left) > 5 else "")
            raise UnsupportedModel(
                f"{model_name!r} has weights the from-scratch model does not use ({shown}), so it would compute "
                "something else; the Hugging Face view still works"
            )
