"""Errors that carry advice.

Every error a user can cause (a model that cannot be loaded, text that does not fit) is one of these
types. Each message says what went wrong *and what to do*; the CLI prints it as one line on stderr
and exits 2, the app shows it with ``st.error``.
"""

from __future__ import annotations


class ProbesError(Exception):
    """Base class: a problem with the user's input or environment, not a bug."""


class ModelUnavailable(ProbesError):
    """The model cannot be found locally and cannot be downloaded (or does not exist)."""


class UnsupportedModel(ProbesError):
    """The from-scratch path does not cover this architecture or config option.

    The Hugging Face view of the model still works; scratch forward and parity refuse by name.
    """


class UnsafeCheckpoint(ProbesError):
    """A checkpoint that could run code when loaded (a pickle that is not plain tensors)."""


class EmptyInput(ProbesError):
    """The text has no tokens to look at."""


class InputTooLong(ProbesError):
    """The text needs more tokens than the model's context window holds."""

    def __init__(self, n_tokens: int, max_tokens: int, model: str, advice: str | None = None):
        self.n_tokens = n_tokens
        self.max_tokens = max_tokens
        self.model = model
        self.custom_advice = advice is not None  # the caller said what to do (else: shorten or truncate)
        self.advice = advice
        advice = advice or (f"shorten it, or ask for truncation (--truncate / truncate=True) to keep the first "
                            f"{max_tokens}")
        super().__init__(f"the text is {n_tokens} tokens but {model} reads at most {max_tokens}: {advice}")

    def __reduce__(self):  # pickled as its arguments (a model server sends it to the one who asked)
        return type(self), (self.n_tokens, self.max_tokens, self.model, self.advice)


class DataUnavailable(ProbesError):
    """Probe data that is not cached and cannot be fetched (or fails its checksum)."""


class BadData(ProbesError):
    """A data file that cannot be read: the message names the file and the line."""


class CannotWrite(ProbesError):
    """An output file that cannot be written (a folder, no permission, a full disk)."""


class BadOption(ProbesError):
    """An option outside its range (a temperature of 0, more new tokens than the context holds…)."""


class NothingToScore(BadData):
    """A probe left with no usable item of its data, or nothing in them it measures."""


class RayUnavailable(ProbesError):
    """A Ray cluster that cannot be used: nothing answers at the address, none runs, or a Ray Client address."""


class ServerLost(ProbesError):
    """A model server on a Ray cluster that died while answering (Ray restarts it; the next call works)."""


class OutOfRange(BadOption, IndexError):
    """A layer, head, item or step outside the model (or the trace, or the batch): one type wherever it is checked
    (:mod:`probes.head_index`). An :class:`IndexError` too, for code that indexes and catches that."""
