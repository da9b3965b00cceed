"""A tiny GPT-2 with one planted head: head 0.0 looks at the previous token and copies it into the residual stream
(the others, and the MLP, write almost nothing), so on alternating text (A B A B …, where the next token is the
one before the current) the model predicts well with it and badly without it."""

from __future__ import annotations

import math

import torch

COPY_HEAD = (0, 0)
ALTERNATING = "the head the head the head the head the head the head"


def plant(model, theta: float = 2 * math.pi / 16, radius: float = 3.0, sharp: float = 12.0, copy: float = 8.0):
    """Rewrite the weights of a 1-layer, 4-head, 32-wide GPT-2 in place (before its scratch network is built)."""
    sd = model.hf.transformer
    d = 8
    with torch.no_grad():
        sd.wte.weight[:, :2] = 0.0  # dims 0-1: position only; dims 2-9: the token; the rest unused
        sd.wte.weight[:, 10:] = 0.0
        sd.wte.weight[:, 2:10] *= 3.0 / sd.wte.weight[:, 2:10].norm(dim=-1, keepdim=True)  # every token as long
        p = torch.arange(sd.wpe.weight.shape[0], dtype=torch.float32)
        sd.wpe.weight.zero_()
        sd.wpe.weight[:, 0], sd.wpe.weight[:, 1] = radius * torch.cos(theta * p), radius * torch.sin(theta * p)
        block = sd.h[0]
        for ln in (block.ln_1, block.ln_2, sd.ln_f):
            ln.weight.fill_(1.0)
            ln.bias.zero_()
        w, b = block.attn.c_attn.weight, block.attn.c_attn.bias  # Conv1D [32, 96]: q | k | v
        w[:, 0:d] = 0.0
        w[:, 32:32 + d] = 0.0
        w[:, 64:64 + d] = 0.0
        b[0:d], b[32:32 + d], b[64:64 + d] = 0.0, 0.0, 0.0
        turn = torch.tensor([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
        w[0:2, 0:2] = sharp * turn  # q_i: position i turned back by one step, so q_i·k_j peaks at j = i − 1
        w[0:2, 32:34] = sharp * torch.eye(2)  # k_j: position j
        w[2:10, 64:72] = torch.eye(d)  # v_j: the token's 8 dims
        o, ob = block.attn.c_proj.weight, block.attn.c_proj.bias  # [H·d, 32]
        o[d:] *= 0.01  # the other heads: weak
        o[0:d] = 0.0
        o[0:d, 2:10] = copy * torch.eye(d)  # head 0 writes the previous token's dims back
        ob.zero_()
        block.mlp.c_proj.weight.mul_(0.01)
        block.mlp.c_proj.bias.zero_()
    model._scratch = None
    return model

