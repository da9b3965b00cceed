"""Direct logit attribution: heads + rest equal the model's own logit; one head's share by hand from Hugging
Face's weights (GPT-2: a LayerNorm with its σ frozen); encoders and multi-token targets refused."""

import pytest
import torch
from numeric import F64

import probes
from probes.effects.attribution import last_target, logit_attribution, target_id
from probes.errors import BadOption, UnsupportedModel
from probes.hf import KeepFloat64

TEXT = "Xiaoming gave the apple to Xiaohong because"


@pytest.mark.numeric
def test_heads_and_rest_sum_to_the_logit(smollm2, gpt2_model64):
    # float64 (a copy: this test's slow part): the parts and the model's own logit, from one pass, agree to float64
    # rounding
    smollm64 = smollm2.cast(torch.float64)
    got = logit_attribution(smollm64, TEXT, target_id(smollm2, "she"), target_id(smollm2, "he"))
    assert got.total == pytest.approx(got.logit, abs=F64, rel=0)
    assert got.heads.shape == (30, 9) and abs(got.heads).max() > 0.05
    one = logit_attribution(gpt2_model64, "Researchers probe every", 7)
    assert one.total == pytest.approx(one.logit, abs=F64, rel=0) and one.other is None


@pytest.mark.numeric
def test_a_head_share_by_hand(gpt2_model64):
    gpt2_model = gpt2_model64  # float64: Hugging Face's pieces and the library's share agree to float64 rounding
    text, target, layer, head = "Researchers probe every layer", 11, 1, 2
    enc = gpt2_model.encode(text)
    hf = gpt2_model.hf.transformer
    with torch.inference_mode(), KeepFloat64():
        out = gpt2_model.hf(input_ids=enc.input_ids, output_hidden_states=True, output_attentions=True)
        block = hf.h[layer]
        h = block.ln_1(out.hidden_states[layer][0])
        v = (h @ block.attn.c_attn.weight + block.attn.c_attn.bias)[:, 64:96].view(-1, 4, 8)[:, head]
        z = out.attentions[layer][0, head][-1] @ v  # the last query's output of this head [d]
        c = z @ block.attn.c_proj.weight[head * 8:(head + 1) * 8]  # what it writes [D]
        # the residual before ln_f: the last block's output, recomputed from its input
        last = hf.h[-1](out.hidden_states[-2])
        x = (last[0] if isinstance(last, tuple) else last)[0, -1]
        sigma = torch.sqrt(x.var(unbiased=False) + hf.ln_f.eps)
        by_hand = ((c - c.mean()) / sigma * hf.ln_f.weight) @ gpt2_model.hf.lm_head.weight[target]
    got = logit_attribution(gpt2_model, text, target)
    assert by_hand.dtype == torch.float64
    assert got.heads[layer, head] == pytest.approx(float(by_hand), abs=F64, rel=0)


def test_refused_with_advice(minilm, smollm2):
    with pytest.raises(BadOption, match="no language-model head"):
        logit_attribution(minilm, "she was hungry", 0)
    with pytest.raises(BadOption, match="is 2 tokens|tokens on smollm2"):
        target_id(smollm2, "Xiaohongxyz")
    with pytest.raises(BadOption, match=r"token id 10000000 is outside smollm2's vocabulary \(0–49151\)"):
        logit_attribution(smollm2, TEXT, 10**7)


def test_the_last_target_is_one_tokens_raw_text_that_target_id_gives_back(smollm2):
    """The default target of the logit attribution: the raw text of the text's last token that round-trips to that
    one token (a label such as 饿(3/3), or a piece of a character's bytes, is not a token's text)."""
    for text, want in (("小明把苹果给了小红，因为她很饿", (20, "为")),  # 她, 很 and 饿 are pieces of bytes
                       ("Xiaoming gave the apple to Xiaohong because she was hungry.", (13, " hungry"))):  # "." → " ."
        ids = smollm2.encode(text).input_ids[0].tolist()
        got = last_target(smollm2, text)
        assert got == want
        assert got is not None
        position, raw = got
        assert target_id(smollm2, raw) == ids[position]
        assert smollm2.tokenizer.encode(raw, add_special_tokens=False) == [ids[position]]
    assert last_target(smollm2, "很饿") is None  # only pieces of characters: the box stays empty


@pytest.mark.numeric
@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_gemma_heads_write_through_the_frozen_post_norm_and_a_final_cap_is_refused(tmp_path, family):
    # Gemma 2 and 3: each head's share is its z_h·W_O[h] through the post-attention norm frozen at the pass, and the
    # heads and the rest sum to the logit; with the final soft-cap on (cap·tanh(logit / cap): no sum) it is refused
    from checkpoints import make_gemma

    plain = probes.models.load(str(make_gemma(tmp_path / "plain", family=family, final_logit_softcapping=None)))
    got = logit_attribution(plain.cast(torch.float64), TEXT, 7)
    assert got.total == pytest.approx(got.logit, abs=F64, rel=0) and abs(got.heads).max() > 1e-3
    capped = probes.load(str(make_gemma(tmp_path / "capped", family=family, final_logit_softcapping=3.0)))
    with pytest.raises(UnsupportedModel, match="final_logit_softcapping=3.0"):
        logit_attribution(capped, TEXT, 7)
