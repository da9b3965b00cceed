"""The family registry: one record per family, found in its own file, read by everything else."""

import ast
from pathlib import Path

import pytest
from transformers import AutoConfig

import probes
from probes import families
from probes.families import Family, family_of

ROOT = Path(__file__).resolve().parents[1]


def test_every_family_has_a_complete_record():
    found = families.families()
    assert [f.name for f in found] == ["bert", "distilbert", "gemma2", "gemma3", "gpt2", "gpt_neox", "llama", "mistral",
                                       "modernbert", "olmo2", "phi3", "qwen2", "qwen3", "roberta"]
    for f in found:
        assert isinstance(f, Family) and f.title and f.model_types and f.implemented and f.refused
        assert callable(f.network) and callable(f.check) and callable(f.capture) and callable(f.scale)
        assert f.positions in ("absolute", "rotary")


@pytest.mark.parametrize("kind, family", [("gpt2", "gpt2"), ("bert", "bert"), ("llama", "llama"),
                                          ("mistral", "mistral"), ("qwen2", "qwen2"), ("qwen3", "qwen3"),
                                          ("phi3", "phi3"), ("gemma2", "gemma2"), ("gemma3_text", "gemma3"),
                                          ("gemma3", None), ("roberta", "roberta"),
                                          ("xlm-roberta", "roberta"), ("camembert", "roberta"),
                                          ("distilbert", "distilbert"), ("gpt_neox", "gpt_neox"), ("olmo2", "olmo2"),
                                          ("modernbert", "modernbert"), ("opt", None),
                                          ("xlm-roberta-xl", None), ("roberta-prelayernorm", None)])
def test_a_config_finds_its_family_by_model_type(kind, family):
    config = AutoConfig.for_model(kind)
    found = family_of(config)
    assert (found.name if found else None) == family


def test_the_records_decide_what_the_loader_does(gpt2_model, minilm, opt_dir, roberta_mlm_dir, distilbert_mlm_dir,
                                                 modernbert_mlm_dir):
    assert gpt2_model.family.pairs is False and minilm.family.pairs and minilm.family.token_types
    for path in (roberta_mlm_dir, distilbert_mlm_dir, modernbert_mlm_dir):  # pairs by separators, no token types
        model = probes.load(str(path))
        assert model.family.pairs and not model.family.token_types
        assert model.encode("one", "two").token_type_ids is None
    assert (gpt2_model.is_causal, minilm.is_causal) == (True, False)
    opt = probes.load(str(opt_dir))
    assert opt.family is None and opt.n_kv_heads == opt.n_heads  # Hugging Face view only, by class name


def test_no_module_outside_the_family_files_names_a_family():
    """Registries, not string checks: the loader, the producers, the readers and the app never compare
    against a family's name or model_type."""
    names = {f.name for f in families.families()} | {t for f in families.families() for t in f.model_types}
    offenders = []
    outside = [p for p in (ROOT / "probes").rglob("*.py") if "scratch" not in p.parts]  # scratch/: the family files
    for path in [*outside, *(ROOT / "dashboard").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                    for value in values:
                        if isinstance(value, ast.Constant) and value.value in names:
                            offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} compares with {value.value!r}")
    assert not offenders, offenders


def test_the_docs_table_is_the_registry():
    assert families.markdown_table() in (ROOT / "docs" / "models.md").read_text()


def test_coverage_sentence_names_every_family():
    assert families.coverage() == ("the from-scratch path covers BERT, DistilBERT, Gemma 2, Gemma 3, GPT-2, GPT-NeoX, "
                                   "Llama, Mistral, ModernBERT, OLMo 2, Phi-3, Qwen2, Qwen3 and RoBERTa")


def test_the_families_in_words():
    assert families.in_words() == ("BERT, DistilBERT, Gemma 2, Gemma 3, GPT-2, GPT-NeoX, Llama, Mistral, ModernBERT, "
                                   "OLMo 2, Phi-3, Qwen2, Qwen3 and RoBERTa")
    bert, gpt2 = (next(f for f in families.families() if f.name == name) for name in ("bert", "gpt2"))
    assert (families.in_words([gpt2]), families.in_words([bert, gpt2]), families.in_words([])) == (
        "GPT-2", "BERT and GPT-2", "")


def test_the_decoders_are_the_families_that_write_text():
    assert [f.name for f in families.decoders()] == ["gemma2", "gemma3", "gpt2", "gpt_neox", "llama", "mistral",
                                                      "olmo2", "phi3", "qwen2", "qwen3"]


def test_known_hub_models_come_from_the_records():
    assert "gpt2" in probes.KNOWN_HUB_MODELS and "HuggingFaceTB/SmolLM2-135M" in probes.KNOWN_HUB_MODELS
    assert set(probes.KNOWN_HUB_MODELS) == {m for f in families.families() for m in f.examples}
