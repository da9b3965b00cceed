"""A tokenised batch (:class:`Encoding`) and one tokenised sequence (:class:`Piece`): what a model's tokenizer
hands either forward pass (:meth:`probes.models.ModelBase.encode`, :meth:`~probes.models.ModelBase.batch`). Plain
data on the bottom floor, so the Protocols of :mod:`probes.seam` can name it without importing a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .tokens import Token


@dataclass
class Encoding:
    """A tokenised batch, ready for either forward pass."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L] (1 = real token)
    token_type_ids: torch.Tensor | None  # [B, L] for BERT sentence pairs, else None
    tokens: list[list[Token]]
    texts: list[str]
    pairs: list[str | None]
    truncated_from: list[int | None] = field(default_factory=list)  # original token count, if cut

    @property
    def truncated(self) -> bool:
        return any(n is not None for n in self.truncated_from)

    def to(self, device: torch.device | str) -> Encoding:
        """The same encoding with its tensors on ``device`` (itself when they are there already)."""
        if self.input_ids.device == torch.device(device):
            return self
        types = None if self.token_type_ids is None else self.token_type_ids.to(device)
        return replace(self, input_ids=self.input_ids.to(device), attention_mask=self.attention_mask.to(device),
                       token_type_ids=types)


@dataclass(frozen=True)
class Piece:
    """One tokenised sequence: ids (special tokens included), each token's character span in its text
    ((0, 0) for special tokens), which text each token came from (None: special), token types (or None)."""

    ids: list[int]
    offsets: list[tuple[int, int]]
    sequence_ids: list[int | None]
    types: list[int] | None = None
