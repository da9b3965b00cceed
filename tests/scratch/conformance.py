"""What the conformance suite (``test_conformance.py``) knows of each family: one :class:`Spec` per registered family
(``probes.families.families()``), in :data:`SPECS` under the record's name: its tiny checkpoint maker, the config
options it varies, the inputs it reads, the options it refuses by name. Every check of the suite runs on every family
from these specs; a family's own file (``test_<family>.py``) keeps only what is peculiar to it.

The checkpoints are made once a session (the ``family_model`` fixture, ``tests/scratch/conftest.py``) and shared by
the suite, ``test_family.py`` and the families' own files: a test that changes its model (``model._scratch = …``)
loads its own (:func:`load`)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import checkpoints
import pytest

import probes
from probes import families, hf, parity, scratch
from probes.scratch.family import DecoderNetwork, Family, RotaryNetwork

ENGLISH = "Xiaoming gave the apple to Xiaohong because she was hungry."
CHINESE = "小明把苹果给了小红，因为她很饿"
BATCH = ("the cat sat on the mat because it was warm and the dog was not", "小明把苹果给了小红")  # a padded batch
PAIRS = ("She was hungry.", "因为她饿了", "And a much longer second sentence than the first one.")


@dataclass(frozen=True)
class Input:
    """Texts (and a second text each, for the families that read pairs) encoded as one padded batch; ``left``: each
    row's padding moved to its left (RoBERTa counts its positions from the ids, so they must not move)."""

    texts: tuple[str, ...]
    pairs: tuple[str, ...] | None = None
    left: bool = False

    def encode(self, model):
        enc = model.encode(list(self.texts), None if self.pairs is None else list(self.pairs))
        return left_padded(enc) if self.left else enc


def left_padded(enc):
    """The same batch with each row's padding moved to its left."""
    ids, mask = enc.input_ids.clone(), enc.attention_mask.clone()
    tokens = []
    for b in range(ids.shape[0]):
        pad = int((mask[b] == 0).sum())
        ids[b], mask[b] = ids[b].roll(pad), mask[b].roll(pad)
        tokens.append(enc.tokens[b][-pad:] + enc.tokens[b][:-pad] if pad else enc.tokens[b])
    return replace(enc, input_ids=ids, attention_mask=mask, tokens=tokens)


DECODER_INPUTS = (Input(BATCH), Input((CHINESE,)), Input((ENGLISH,)))
ENCODER_TEXTS = (ENGLISH, "小明把苹果给了小红", "Short.")


@dataclass(frozen=True)
class Spec:
    """One family's part of the suite.

    ``options``: name → the maker's keyword arguments (a config varied), or the name of a conftest fixture that
    gives the checkpoint's folder; each is bit-identical to Hugging Face in eager fp32 on every one of ``inputs`` (but
    ``rounded`` ones: Hugging Face computes them in float32 by its own operations, by design, so they agree within fp32
    rounding and have no float64 proof). ``lazy``: the options the flash kernel runs on (sdpa runs on every option),
    on the first ``lazy_inputs`` inputs. ``proof``: the options proven in float64 (None: every one but the rounded),
    on the first ``proof_inputs``, inside ``float64_reference`` where the record refuses a float64 proof against
    Hugging Face's own code. ``refused``: name → (the maker's arguments, the words naming the option) of each option
    the network refuses; ``refused_at_load``: the same for the config.json edits the loader itself refuses.
    ``separators``: how many separator tokens a sentence pair holds (``Family.pairs``). ``sample``: the option
    ``test_family.py`` holds to the Protocols, ``protocols`` those the network keeps besides
    :class:`~probes.scratch.family.Network`."""

    make: Callable[..., Path]
    options: dict[str, dict[str, Any] | str]
    inputs: tuple[Input, ...]
    lazy: tuple[str, ...]
    sample: str
    protocols: tuple[type, ...]
    refused: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    refused_at_load: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    rounded: tuple[str, ...] = ()
    proof: tuple[str, ...] | None = None
    lazy_inputs: int = 1  # the first this many of inputs
    proof_inputs: int = 1
    separators: int = 0  # in a sentence pair (record.pairs)
    float64_reference: Callable[[], AbstractContextManager] | None = None

    def proven(self) -> tuple[str, ...]:
        return tuple(o for o in self.options if o not in self.rounded) if self.proof is None else self.proof


def decoder(make: Callable[..., Path], options: dict, lazy: tuple[str, ...], sample: str,
            refused: dict | None = None, **more) -> Spec:
    """A decoder's spec: the padded batch, Chinese and English alone; a final norm and a head (DecoderNetwork), rotary
    positions (RotaryNetwork)."""
    return Spec(make, options, DECODER_INPUTS, lazy, sample, (DecoderNetwork, RotaryNetwork), refused or {}, **more)


def gemma2_random(seed: int) -> dict:
    """Window sizes, soft-cap values, head widths and grouped-query ratios drawn at random (seeded)."""
    r = random.Random(seed)
    heads = r.choice([2, 4, 8])
    return dict(num_attention_heads=heads, num_key_value_heads=r.choice([k for k in (1, 2, 4, 8) if heads % k == 0]),
                head_dim=r.choice([4, 8, 12, 16]), sliding_window=r.randint(1, 8),
                attn_logit_softcapping=r.choice([None, 1.0, 3.0, 20.0]),
                final_logit_softcapping=r.choice([None, 0.5, 5.0]), query_pre_attn_scalar=r.choice([4, 16, 64]),
                layer_types=[r.choice(["sliding_attention", "full_attention"]) for _ in range(3)])


def gemma3_rope(local: float = 10_000.0, glob: float = 1_000_000.0, factor: float | None = 8.0) -> dict:
    """Gemma 3's rotary parameters by layer type (the releases': θ 10,000 local, 1,000,000 global with linear 8)."""
    linear = {"rope_type": "linear", "factor": factor} if factor else {"rope_type": "default"}
    return {"sliding_attention": {"rope_type": "default", "rope_theta": local},
            "full_attention": {**linear, "rope_theta": glob}}


def gemma3_random(seed: int) -> dict:
    """Window sizes, logit soft-caps, head widths, grouped-query ratios and rotary bases drawn at random (seeded; no
    score cap: Hugging Face's Gemma 3 ignores it, and it is refused at load)."""
    r = random.Random(seed)
    heads = r.choice([2, 4, 8])
    return dict(num_attention_heads=heads, num_key_value_heads=r.choice([k for k in (1, 2, 4, 8) if heads % k == 0]),
                head_dim=r.choice([4, 8, 12, 16]), sliding_window=r.randint(1, 8),
                final_logit_softcapping=r.choice([None, 0.5, 5.0]), query_pre_attn_scalar=r.choice([4, 16, 64]),
                layer_types=[r.choice(["sliding_attention", "full_attention"]) for _ in range(3)],
                rope_parameters=gemma3_rope(local=r.choice([10.0, 10_000.0]), glob=r.choice([100.0, 1_000_000.0]),
                                            factor=r.choice([None, 2.0, 8.0])))


def modernbert_random(seed: int) -> dict:
    """A tiny ModernBERT's options drawn at random: layers, heads and head width, the window, both θ, which layers
    are global, the optional biases, the activations, with or without the masked-LM head."""
    rng = random.Random(seed)
    heads = rng.choice([1, 2, 4])
    d = rng.choice([4, 8, 12, 16])
    return dict(num_hidden_layers=rng.randint(2, 4), num_attention_heads=heads, hidden_size=heads * d,
                intermediate_size=rng.choice([8, 24, 40]), local_attention=rng.choice([2, 4, 6, 9, 16]),
                global_attn_every_n_layers=rng.choice([1, 2, 3]),
                global_rope_theta=rng.choice([50.0, 1e4, 160_000.0]), local_rope_theta=rng.choice([7.0, 500.0, 1e4]),
                norm_bias=rng.random() < 0.5, attention_bias=rng.random() < 0.5, mlp_bias=rng.random() < 0.5,
                classifier_bias=rng.random() < 0.5, decoder_bias=rng.random() < 0.5,
                hidden_activation=rng.choice(["gelu", "gelu_pytorch_tanh", "silu"]),
                classifier_activation=rng.choice(["gelu", "relu"]), masked_lm=rng.random() < 0.6)


def _family(family: str) -> Callable[..., Path]:
    """make_llama for one of the Llama-shaped records (``family=``)."""
    return lambda path, **options: checkpoints.make_llama(path, family=family, **options)


def _gemma3(path: Path, **options) -> Path:
    return checkpoints.make_gemma(path, family="gemma3", **options)


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16, "rope_theta": 10000.0}
YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32, "rope_theta": 10000.0}
GPT2_VARIED: dict[str, dict[str, Any]] = {
    "3-layers": {},
    "unscaled": dict(scale_attn_weights=False),
    "inverse-layer-scale": dict(scale_attn_by_inverse_layer_idx=True),
    "reorder-and-upcast": dict(reorder_and_upcast_attn=True),
    "gelu": dict(activation_function="gelu"),
    "relu": dict(activation_function="relu"),
    "gelu-fast": dict(activation_function="gelu_fast"),
    "gelu-pytorch-tanh": dict(activation_function="gelu_pytorch_tanh"),
    "quick-gelu": dict(activation_function="quick_gelu"),
    "silu": dict(activation_function="silu"),
    "n-inner-24": dict(n_inner=24),
    "eps-1e-2": dict(layer_norm_epsilon=1e-2),
}
GPT2_OPTIONS = {name: dict(n_layer=3, **v) for name, v in GPT2_VARIED.items()}  # each on 3 layers
ACT = "gelu_10"  # Hugging Face has it (clipped GELU); probes.scratch.activations does not
BERT_SHAPES = {  # layers x heads x width, BERT's and RoBERTa's
    "1x1x16": dict(num_hidden_layers=1, num_attention_heads=1, hidden_size=16, intermediate_size=32),
    "3x6x48": dict(num_hidden_layers=3, num_attention_heads=6, hidden_size=48, intermediate_size=40)}
BERT_REFUSED: dict[str, tuple[dict[str, Any], str]] = {"gelu-10": (dict(hidden_act=ACT), f"hidden_act='{ACT}'"),
                "cross-attention": (dict(is_decoder=True, add_cross_attention=True), "add_cross_attention")}

SPECS: dict[str, Spec] = {
    "gpt2": Spec(
        checkpoints.make_gpt2,
        {"1x1x16": dict(n_layer=1, n_head=1, n_embd=16),  # layers x heads x width
         "2x4x32": "gpt2_dir",  # make_gpt2's own
         "3x6x48": dict(n_layer=3, n_head=6, n_embd=48),
         "2x2x64": dict(n_layer=2, n_head=2, n_embd=64),
         **GPT2_OPTIONS},
        (Input((ENGLISH, "小明把苹果给了小红", "The cat sat.")),),
        lazy=(), sample="2x4x32", protocols=(DecoderNetwork,),  # flash: test_backends.py's GPT-2 test
        refused={"gelu-10": (dict(activation_function=ACT), f"activation_function='{ACT}'"),
                 "mish": (dict(activation_function="mish"), "activation_function='mish'"),
                 "cross-attention": (dict(add_cross_attention=True), "add_cross_attention")},
        # Hugging Face's GPT-2 then computes its scores in float32 by design (test_gpt2.py: no float64 proof)
        rounded=("reorder-and-upcast",)),
    "bert": Spec(
        checkpoints.make_bert,
        {**BERT_SHAPES, "2x4x32": "bert_dir",  # make_bert's own
         "masked-lm": "bert_mlm_dir",
         "gelu-new": dict(hidden_act="gelu_new"), "relu": dict(hidden_act="relu"), "silu": dict(hidden_act="silu"),
         "eps-1e-2": dict(layer_norm_eps=1e-2), "decoder": dict(is_decoder=True)},
        (Input(ENCODER_TEXTS, PAIRS), Input(ENCODER_TEXTS)), proof_inputs=2,
        lazy=(), sample="masked-lm", protocols=(), separators=2,  # flash: test_backends.py (MiniLM, and against eager)
        refused=BERT_REFUSED,
        # transformers 5 ignores position_embedding_type, so neither path would be right
        refused_at_load={"relative-key": (dict(position_embedding_type="relative_key"),
                                          "position_embedding_type='relative_key'")}),
    "roberta": Spec(
        checkpoints.make_roberta,
        {**BERT_SHAPES, "masked-lm": "roberta_mlm_dir",
         "relu-masked-lm": dict(masked_lm=True, hidden_act="relu"),  # RobertaLMHead's GELU whatever hidden_act says
         "gelu-new": dict(hidden_act="gelu_new"), "eps-1e-2": dict(layer_norm_eps=1e-2),
         "decoder": dict(is_decoder=True),
         "pad-0": dict(pad_token_id=0),  # positions from 1 (a padding row at 0)
         "pad-3-masked-lm": dict(pad_token_id=3, masked_lm=True),  # positions from 4
         "type-vocab-2": dict(type_vocab_size=2),  # a second token type the tokenizer never gives
         "xlm-roberta": dict(model_type="xlm-roberta", masked_lm=True),
         "camembert": dict(model_type="camembert", pad_token_id=0)},
        (Input(ENCODER_TEXTS, PAIRS, left=True), Input(ENCODER_TEXTS, PAIRS), Input(ENCODER_TEXTS)), proof_inputs=3,
        lazy=("masked-lm",), sample="masked-lm", protocols=(), separators=3,  # "<s> A </s></s> B </s>"
        refused=BERT_REFUSED,
        refused_at_load={"relative-key-query": (dict(position_embedding_type="relative_key_query"),
                                                "position_embedding_type='relative_key_query'")}),
    "distilbert": Spec(
        checkpoints.make_distilbert,
        {"1x1x16": dict(n_layers=1, n_heads=1, dim=16, hidden_dim=32),
         "3x6x48": dict(n_layers=3, n_heads=6, dim=48, hidden_dim=40),
         "masked-lm": "distilbert_mlm_dir",
         "relu-masked-lm": dict(activation="relu", masked_lm=True),  # the layers' and the head's
         "gelu-new": dict(activation="gelu_new"),
         "sinusoidal-masked-lm": dict(sinusoidal_pos_embds=True, masked_lm=True)},
        (Input(ENCODER_TEXTS, PAIRS), Input(ENCODER_TEXTS)), proof_inputs=2,
        lazy=("masked-lm",), sample="masked-lm", protocols=(), separators=2,
        refused={"gelu-10": (dict(activation=ACT), f"activation='{ACT}'")}),
    "modernbert": Spec(
        checkpoints.make_modernbert,
        {**{f"random-{seed}": modernbert_random(seed) for seed in range(6)},
         "masked-lm": "modernbert_mlm_dir",
         # Hugging Face's ModernBERT turns every number of each head whatever partial_rotary_factor says
         "partial-rotary-ignored": dict(rope_parameters={
             kind: {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}
             for kind in ("full_attention", "sliding_attention")})},
        (Input((ENGLISH, "小明把苹果给了小红，因为她饿了。", "Short."), PAIRS),
         Input((ENGLISH, "小明把苹果给了小红，因为她饿了。", "Short."))), proof_inputs=2,
        lazy=("masked-lm",), sample="masked-lm", protocols=(RotaryNetwork,), separators=2,
        refused={"gelu-10": (dict(hidden_activation=ACT), f"hidden_activation='{ACT}'"),
                 "classifier-gelu-10": (dict(classifier_activation=ACT, masked_lm=True),
                                        f"classifier_activation='{ACT}'"),
                 "rope-linear": (dict(rope_parameters={
                     "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
                     "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}), "rope_type='linear'")}),
    "llama": decoder(
        checkpoints.make_llama,
        {"default": "llama_dir",  # 6 query heads reading 2 key/value heads
         "group-1": dict(num_attention_heads=9, num_key_value_heads=9, hidden_size=72),
         "group-3": dict(num_attention_heads=9, num_key_value_heads=3, hidden_size=72),
         "group-9": dict(num_attention_heads=9, num_key_value_heads=1, hidden_size=72),  # multi-query
         "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
         "rope-linear": dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
         "rope-dynamic": dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
         "rope-llama3": dict(rope_parameters=LLAMA3),
         "tied": dict(tie_word_embeddings=True),
         "biases": dict(attention_bias=True, mlp_bias=True),
         "head-dim": dict(head_dim=12),  # not hidden_size / heads (48 / 6 = 8)
         "gelu-tanh": dict(hidden_act="gelu_pytorch_tanh")},
        lazy=("group-3", "group-9", "rope-llama3", "head-dim"), sample="default",
        refused={"yarn": (dict(rope_parameters=YARN), "rope_type='yarn'"),
                 "partial-rotary": (dict(rope_parameters={"rope_type": "default", "partial_rotary_factor": 0.5,
                                                          "rope_theta": 10000.0}), "partial_rotary_factor=0.5")}),
    "mistral": decoder(
        _family("mistral"), {"window-3": dict(sliding_window=3)},  # shorter than the inputs
        lazy=("window-3",), sample="window-3",
        refused={"yarn": (dict(rope_parameters=YARN), "rope_type='yarn'")}),
    "qwen2": decoder(
        _family("qwen2"),
        {"window-3-on-layer-1": dict(use_sliding_window=True, sliding_window=3, max_window_layers=1)},  # q/k/v biases
        lazy=("window-3-on-layer-1",), sample="window-3-on-layer-1",
        refused={"yarn": (dict(rope_parameters=YARN), "rope_type='yarn'")}),
    "qwen3": decoder(
        _family("qwen3"),
        {"group-3": dict(),  # 6 query heads reading 2; every tiny Qwen3 has head width 12 and QK-norm
         "group-1": dict(num_key_value_heads=6),
         "group-6": dict(num_key_value_heads=1),  # multi-query
         "biases": dict(attention_bias=True),  # q, k, v and o biases (QK-norm comes after the q and k biases)
         "window": dict(use_sliding_window=True, sliding_window=3, max_window_layers=1),  # layer 1 only
         "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}),  # Qwen3's own θ
         "rope-linear": dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
         "tied": dict(tie_word_embeddings=True)},  # Qwen3-0.6B ties its embeddings
        lazy=("group-3", "window"), sample="window",
        refused={"yarn": (dict(rope_parameters=YARN), "rope_type='yarn'"),
                 "partial-rotary": (dict(rope_parameters={"rope_type": "default", "partial_rotary_factor": 0.5,
                                                          "rope_theta": 10000.0}), "partial_rotary_factor=0.5"),
                 "relu6": (dict(hidden_act="relu6"), "hidden_act='relu6'")}),
    "olmo2": decoder(
        _family("olmo2"),
        {"group-3": dict(),  # 6 query heads reading 2 key/value heads
         "group-1": dict(num_key_value_heads=6),  # OLMo-2-1B: as many key/value heads as query heads
         "group-6": dict(num_key_value_heads=1),
         "biases": dict(attention_bias=True),
         "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),  # OLMo 2's θ
         "tied": dict(tie_word_embeddings=True),
         "eps": dict(rms_norm_eps=1e-3)},
        lazy=("group-3", "biases"), sample="biases",
        refused={"yarn": (dict(rope_parameters=YARN), "rope_type='yarn'"),
                 "relu6": (dict(hidden_act="relu6"), "hidden_act='relu6'")}),
    "phi3": decoder(
        _family("phi3"),
        {"group-3": dict(),  # 6 query heads reading 2 (Phi-3-mini: 32 on 32, Phi-3-medium: 40 on 10)
         "group-1": dict(num_key_value_heads=6),
         "group-6": dict(num_key_value_heads=1),  # multi-query
         "window": dict(sliding_window=3),  # every layer (Phi-3-mini-4k: 2047)
         "partial-rotary-half": dict(partial_rotary_factor=0.5),  # head width 8: the first 4 numbers turn
         "partial-rotary-3/4": dict(partial_rotary_factor=0.75),  # the first 6 (pairs (i, i + 3)), as Phi-4-mini's
         "window-partial-rotary-half": dict(sliding_window=3, partial_rotary_factor=0.5),
         "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
         "tied": dict(tie_word_embeddings=True),
         "gelu": dict(hidden_act="gelu")},
        lazy=("group-3", "window", "partial-rotary-3/4"), sample="window-partial-rotary-half",
        refused={"longrope": (dict(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 4,
                                                    "long_factor": [2.0] * 4, "rope_theta": 10000.0},
                                   original_max_position_embeddings=32), "rope_type='longrope'"),
                 "odd-rotary": (dict(partial_rotary_factor=0.375), "the rotary width 3"),  # 8 × 0.375: no pairs
                 "relu6": (dict(hidden_act="relu6"), "hidden_act='relu6'")}),
    "gpt_neox": decoder(
        checkpoints.make_neox,
        {"parallel": dict(),  # Pythia: the parallel residual, rotary_pct 0.25 (2 of a head's 8 numbers), biases
         "sequential": dict(use_parallel_residual=False),  # x + attention, then x + MLP (as GPT-2)
         "rotary-half": dict(partial_rotary_factor=0.5),
         "rotary-full": dict(partial_rotary_factor=1.0, rope_theta=500.0),
         "no-attention-bias": dict(attention_bias=False, use_parallel_residual=False),
         "tied": dict(tie_word_embeddings=True),
         "gelu-tanh": dict(hidden_act="gelu_new", layer_norm_eps=1e-3),
         "rotary-pct": dict(rope_parameters=None, rotary_pct=0.5, rotary_emb_base=1000)},  # the older config's names
        lazy=("parallel", "sequential", "rotary-full"), sample="sequential",
        refused={"rope-linear": (dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                                                       "partial_rotary_factor": 0.25}), "rope_type='linear'"),
                 "odd-rotary": (dict(partial_rotary_factor=0.375), "the rotary width 3"),  # 8 × 0.375: no pairs
                 "relu6": (dict(hidden_act="relu6"), "hidden_act='relu6'")}),
    "gemma2": decoder(
        checkpoints.make_gemma,
        {"default": dict(),  # 3 layers (local, global, local), 4 query heads reading 2, head width 16, window 3,
         # score cap 5, logit cap 3
         "group-1": dict(num_key_value_heads=4),
         "multi-query": dict(num_key_value_heads=1),
         "no-softcap": dict(attn_logit_softcapping=None, final_logit_softcapping=None),
         "wide-window": dict(sliding_window=6, attn_logit_softcapping=50.0, final_logit_softcapping=30.0),  # releases'
         "head-8": dict(head_dim=8, query_pre_attn_scalar=8),
         "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}),
         "untied": dict(tie_word_embeddings=False),
         "all-global": dict(layer_types=["full_attention"] * 3),
         **{f"random-{seed}": gemma2_random(seed) for seed in range(4)}},
        lazy=("default", "no-softcap", "random-1"), sample="default",
        proof=("default", "multi-query", "no-softcap", "wide-window", "random-0", "random-2"),
        float64_reference=checkpoints.gemma_norm_in_input_dtype,
        refused={"rope-linear": (dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
                                 "rope_type='linear'"),
                 "relu6": (dict(hidden_activation="relu6"), "hidden_activation='relu6'"),
                 "bidirectional": (dict(use_bidirectional_attention=True), "use_bidirectional_attention")}),
    "gemma3": decoder(
        _gemma3,
        {"default": dict(),  # Gemma 2's shape, window 3, no caps, the releases' rotary parameters per layer type
         "group-1": dict(num_key_value_heads=4),
         "multi-query": dict(num_key_value_heads=1),
         "final-softcap": dict(final_logit_softcapping=3.0),  # Gemma 2's logit cap, honoured if set
         "head-8": dict(head_dim=8, query_pre_attn_scalar=8),
         "both-default-rope": dict(rope_parameters=gemma3_rope(factor=None)),
         "slow-local": dict(rope_parameters=gemma3_rope(local=100.0, glob=10.0, factor=2.0)),  # local turns slower
         "untied": dict(tie_word_embeddings=False),
         "all-global": dict(layer_types=["full_attention"] * 3),
         "all-local": dict(layer_types=["sliding_attention"] * 3),
         **{f"random-{seed}": gemma3_random(seed) for seed in range(4)}},
        lazy=("default", "final-softcap", "random-1", "random-3"), sample="default", lazy_inputs=3,
        proof=("default", "multi-query", "final-softcap", "slow-local", "random-0", "random-2"), proof_inputs=2,
        float64_reference=checkpoints.gemma_norm_in_input_dtype,
        refused={"yarn": (dict(rope_parameters={**gemma3_rope(), "full_attention": {
                     "rope_type": "yarn", "factor": 8.0, "rope_theta": 1_000_000.0}}), "rope_type='yarn'"),
                 "dynamic": (dict(rope_parameters={**gemma3_rope(), "sliding_attention": {
                     "rope_type": "dynamic", "factor": 2.0, "rope_theta": 10_000.0}}), "rope_type='dynamic'"),
                 "relu6": (dict(hidden_activation="relu6"), "hidden_activation='relu6'"),
                 "bidirectional": (dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
                 "attention-bias": (dict(attention_bias=True), "attention_bias")}),
}


def record(name: str) -> Family:
    """The registered family record of that name."""
    return next(f for f in families.families() if f.name == name)


def cases(which: Callable[[Spec], tuple[str, ...]]) -> list:
    """``pytest.param(family, option)`` for each registered family with a spec and each option ``which`` names in
    it."""
    return [pytest.param(f.name, option, id=f"{f.name}-{option}") for f in families.families() if f.name in SPECS
            for option in which(SPECS[f.name])]


def load(family: str, folder: Path, **options):
    """A fresh tiny checkpoint of ``family`` (the spec's maker, ``options`` to it) in ``folder``, loaded: for the tests
    that change their model."""
    return probes.load(str(SPECS[family].make(folder / "m", **options)))


def compare(model, enc, backend: str = "eager") -> parity.ParityReport:
    """Hugging Face's pass against ours on ``enc``."""
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


def parity_of(model, texts=BATCH, backend: str = "eager") -> parity.ParityReport:
    """:func:`compare` on ``texts`` encoded as one batch."""
    return compare(model, model.encode(list(texts)), backend)


N = TypeVar("N")


def built(model, cls: type[N]) -> N:
    """``scratch.build(model)``, held to be ``cls``, the family's own network class: for a test that reads its parts
    (its layers' weights, its tables), which the Protocols do not name."""
    net = scratch.build(model)
    assert isinstance(net, cls), f"{type(net).__name__} is not {cls.__name__}"
    return net


class FamilyModels:
    """Each (family, option)'s checkpoint, made and loaded once (``get``): what the ``family_model`` fixture hands
    out."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.loaded: dict[tuple[str, str], Any] = {}

    def get(self, family: str, option: str, fixture: Callable[[str], Path]):
        """The loaded model of that option of the family's spec; ``fixture(name)``: a conftest fixture's value, for the
        options that name one."""
        key = (family, option)
        if key not in self.loaded:
            how = SPECS[family].options[option]
            if isinstance(how, str):
                path = fixture(how)
            else:
                path = SPECS[family].make(self.folder / re.sub(r"\W", "_", f"{family}-{option}"), **how)
            self.loaded[key] = probes.load(str(path))
        return self.loaded[key]
