"""QK attribution: why a head puts its weight where it does. One pre-softmax score s_ij of layer L, head h
(query token i, key token j) split exactly into what wrote the query and what wrote the key.

The layer's input x is a sum of parts: the embeddings (the token's, and the position's and token type's where
the family adds them), every earlier head's output z_h·W_O[h], every earlier MLP's output and the biases. The
norm before the attention (LayerNorm, RMSNorm; BERT's norms along the stream) is made linear by freezing its
scale at its value in this pass, as the direct logit attribution does; LayerNorm's mean-centring is linear
already, so each part is centred on its own and no cross term is left over. q and k are then linear in the
parts, plus a constant (the norm's bias and the projections' biases): q_i = Σ_a q_i(a) + q_i(bias),
k_j = Σ_b k_j(b) + k_j(bias), and rotary families turn each part by its position (a rotation is linear too).
So

    s_ij = scale · q_i·k_j = Σ_a Σ_b scale · q_i(a)·k_j(b)

a matrix of query part × key part terms whose sum is the model's own score (up to rounding: the split runs in
float64; tests hold it to 1e-4 of the score's scale for a float32 model and 1e-9 for a float64 one). The
softmax that turns scores into weights is not linear and is not split: a part with a large term raises the
score of this key against the others of the row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..attention_math import allowed_keys
from ..errors import BadOption
from ..scratch import build, outputs

BIAS_QK = "q/k biases"  # the constant part of q and k: the norm's bias and the projections' biases


@dataclass
class QKAttribution:
    """One score of one head split into query part × key part terms (:func:`qk_attribution`)."""

    model: str
    layer: int
    head: int
    query: int  # the query token (index among the real tokens)
    key: int  # the key token
    tokens: list[str]  # the real tokens, readable
    parts: list[str]  # the parts' names, the same on both sides: "token embedding", "head 0.7", "MLP 3", …
    matrix: np.ndarray  # [P, P] float64: row a (what wrote the query) × column b (what wrote the key)
    score: float  # the model's own pre-softmax score scale·q_i·k_j (float64 from the pass's q and k)
    bound: float  # scale·‖q_i‖·‖k_j‖: the score's scale (|score| ≤ bound), what |Δ| is judged against
    weight: float  # the attention weight α_ij the score became (the softmax of its row)

    @property
    def total(self) -> float:
        """The sum of the parts: equal to ``score`` up to rounding (``delta``)."""
        return float(self.matrix.sum())

    @property
    def delta(self) -> float:
        return abs(self.total - self.score)

    def frame(self) -> pd.DataFrame:
        """Every nonzero term as a tidy table, largest |term| first: query_part, key_part, contribution, share (of
        the score), with the layer, head and both tokens."""
        rows, cols = np.nonzero(self.matrix)
        values = self.matrix[rows, cols]
        order = np.argsort(-np.abs(values), kind="stable")
        frame = pd.DataFrame({"query_part": [self.parts[a] for a in rows[order]],
                              "key_part": [self.parts[b] for b in cols[order]], "contribution": values[order]})
        frame["share"] = frame["contribution"] / self.score if self.score else np.nan
        frame.insert(0, "key_token", self.tokens[self.key])
        frame.insert(0, "query_token", self.tokens[self.query])
        frame.insert(0, "head", self.head)
        frame.insert(0, "layer", self.layer)
        return frame

    def top(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` largest terms by |contribution|."""
        return self.frame().head(n).reset_index(drop=True)

    def side(self, axis: str) -> pd.Series:
        """Each part's total on one side: "query" (row sums: what each query part adds with every key part) or
        "key" (column sums); each sums to the score."""
        sums = self.matrix.sum(axis=1 if axis == "query" else 0)
        return pd.Series(sums, index=self.parts, name=f"{axis}_side")

    def grid(self, n: int = 8) -> pd.DataFrame:
        """A small grid: the ``n`` query parts and ``n`` key parts with the largest |side total|, the others of
        each side lumped into "other parts" (so the grid still sums to the score). Tidy: query_part, key_part,
        contribution."""
        keep = {axis: list(self.side(axis).abs().sort_values(ascending=False, kind="stable").index[:n])
                for axis in ("query", "key")}
        index = {name: i for i, name in enumerate(self.parts)}
        lumped = {}
        for axis in ("query", "key"):
            names = keep[axis] + (["other parts"] if len(keep[axis]) < len(self.parts) else [])
            groups = np.zeros((len(names), len(self.parts)))
            for p, name in enumerate(self.parts):
                groups[names.index(name) if name in keep[axis] else len(names) - 1, index[name]] = 1.0
            lumped[axis] = (names, groups)
        (q_names, q_groups), (k_names, k_groups) = lumped["query"], lumped["key"]
        small = q_groups @ self.matrix @ k_groups.T
        return pd.DataFrame([(q, k, small[a, b]) for a, q in enumerate(q_names) for b, k in enumerate(k_names)],
                            columns=["query_part", "key_part", "contribution"])

    def sentence(self, row) -> str:
        """One term in words: "key 'Xiaohong': the output of head 0.7 × query 'she': its token embedding, +2.1 of
        the score 4.3"."""
        return (f"key {self.tokens[self.key]!r}: {describe(row.key_part)} × query {self.tokens[self.query]!r}: "
                f"{describe(row.query_part)}, {row.contribution:+.3g} of the score {self.score:.3g}")


def describe(part: str) -> str:
    """A part's name as words after "key 'x':"."""
    if part.endswith("embedding"):
        return f"its {part}"
    if part.startswith(("head ", "MLP ")):
        return f"the output of {part}"
    if part == "biases":
        return "the biases written into the residual stream"
    if part == BIAS_QK:
        return "the bias of its projection (and its norm's)"
    return part


@dataclass
class _HeadPass:
    """One from-scratch pass up to layer ``layer`` (the layers after it are not needed) and what splitting head
    ``layer``.``head``'s scores reads from it: shared by :func:`qk_attribution` and :func:`senders_on_text`."""

    net: object
    enc: object
    got: object  # scratch.outputs(..., keep_z, keep_inputs, upto=layer)
    layer: int
    head: int
    group: int  # the key/value head this head reads (grouped-query)
    scale: float
    n: int  # real tokens
    q: torch.Tensor  # [n, d] float64: the head's own q, from the pass
    k: torch.Tensor  # [n, d] float64: its key/value head's own k
    allowed: torch.Tensor  # [n, n] bool: the keys each query may see (causal mask, sliding window)

    def parts(self, positions: list[int]) -> tuple[list[str], torch.Tensor, torch.Tensor]:
        """The residual parts' names (and :data:`BIAS_QK` last) and this head's q and k of each part at
        ``positions``: ``[P + 1, len(positions), d]`` each, float64."""
        where = torch.tensor(positions, device=self.enc.input_ids.device)
        named = self.net.residual_parts(self.layer, self.enc.input_ids, self.enc.token_type_ids, self.got.inputs,
                                        self.got.z, where, torch.float64)
        q, k = self.net.qk_parts(self.layer, torch.stack(list(named.values())), self.got.inputs[self.layer][0, where],
                                 where, self.enc.input_ids.shape[1])
        return [*named, BIAS_QK], q[:, self.head], k[:, self.group]


def _head_pass(model, text: str, layer: int, head: int, pair: str | None, truncate: bool) -> _HeadPass:
    net = build(model)  # an architecture the from-scratch path does not cover is refused here
    n_layers, n_heads = len(net.layers), model.n_heads
    if not 0 <= layer < n_layers:
        raise BadOption(f"layer {layer} does not exist: {model.name} has layers 0–{n_layers - 1}")
    if not 0 <= head < n_heads:
        raise BadOption(f"head {head} does not exist: {model.name} has heads 0–{n_heads - 1}")
    enc = model.encode(text, pair, truncate=truncate).to(model.device)  # an empty text is refused here (EmptyInput)
    n = int(enc.attention_mask.sum())
    got = outputs(model, enc, logits=False, keep_z=True, keep_inputs=True, upto=layer)
    group = head // (n_heads // model.n_kv_heads)
    allowed = allowed_keys(enc.attention_mask, net.causal, window=model.family.window(model.config, layer))
    with torch.inference_mode():
        own_q, own_k, _ = net.qkv(layer, got.inputs[layer])
    return _HeadPass(net, enc, got, layer, head, group, model.family.scale(model.config, layer), n,
                     own_q[0, head, :n].double(), own_k[0, group, :n].double(), allowed[0, 0, :n, :n].expand(n, n))


def qk_attribution(model, text: str, layer: int, head: int, query: int, key: int, pair: str | None = None,
                   truncate: bool = False) -> QKAttribution:
    """Split head ``layer``.``head``'s score of query token ``query`` on key token ``key`` (indices among the real
    tokens of ``text``, and of ``pair``'s for a BERT sentence pair) into query part × key part terms; the model's
    own from-scratch pass (eager attention), the split in float64. ``truncate``: keep the first tokens of a text
    longer than the context window (else it is refused)."""
    run = _head_pass(model, text, layer, head, pair, truncate)
    n = run.n
    for name, position in (("query", query), ("key", key)):
        if not 0 <= position < n:
            raise BadOption(f"{name} token {position} is outside the text's {n} tokens (0–{n - 1})")
    row = run.allowed[query]
    if not bool(row[key]):
        window = model.family.window(model.config, layer)
        why = "is after the query: a causal model's query sees only the past" if key > query else \
            f"is outside layer {layer}'s sliding window of {window} tokens"
        raise BadOption(f"key token {key} {why}, so head {layer}.{head} gives it no score: pick a key at or before "
                        f"token {query}")
    with torch.inference_mode():
        names, q, k = run.parts([query, key])
        q_i, k_j = q[:, 0], k[:, 1]  # [P + 1, d]: the query's parts at i, the key's at j
        matrix = run.scale * (q_i @ k_j.T)
        scores = run.scale * (run.k @ run.q[query])  # the row: every key's score, from the pass's own q and k
        scores = scores.masked_fill(~row, float("-inf"))
        weight = float(torch.softmax(scores, -1)[key])
        score = float(scores[key])
        bound = run.scale * float(run.q[query].norm() * run.k[key].norm())
    matrix = matrix.cpu().numpy()
    keep = [p for p in range(len(names)) if matrix[p].any() or matrix[:, p].any()]  # a part that is all zero: none
    enc = run.enc
    tokens = [t.text for t, real in zip(enc.tokens[0], enc.attention_mask[0].bool().tolist()) if real]
    return QKAttribution(model.name, layer, head, query, key, tokens, [names[p] for p in keep],
                         matrix[np.ix_(keep, keep)], score, bound, weight)


def senders_on_text(model, text: str, layer: int, head: int, cells: int = 8, pair: str | None = None,
                    truncate: bool = False, first_token: bool = False) -> pd.DataFrame:
    """Data-dependent composition: how much of head ``layer``.``head``'s scores on this text comes from each earlier
    head's output, on the query side (Q-composition) and on the key side (K-composition). The ``cells`` (query, key)
    cells the head weighs most are split as :func:`qk_attribution` splits one, and each sender's side totals are
    summed over them. The first token is left out as a key (an attention sink would be every head's top cell) unless
    ``first_token``. One row per sender and side: sender_layer, sender_head, kind ("q" or "k"), contribution (its
    summed side total), share (of the cells' summed scores), cells (how many were read)."""
    n_layers = len(build(model).layers)
    if not 0 < layer < n_layers:
        raise BadOption(f"head {layer}.{head} has no earlier heads to read from: pick a layer from 1 to "
                        f"{n_layers - 1}")
    run = _head_pass(model, text, layer, head, pair, truncate)
    n, scale = run.n, run.scale
    with torch.inference_mode():
        scores = scale * (run.q @ run.k.T)  # [n, n]
        weights = torch.softmax(scores.masked_fill(~run.allowed, float("-inf")), -1)
        if not first_token:
            weights[:, 0] = 0.0
        weights[0] = 0.0  # the first query sees only itself in a decoder: nothing to compare
        picked = torch.topk(weights.flatten(), min(cells, int((weights > 0).sum()))).indices
        if len(picked) == 0:
            raise BadOption(f"the text is too short for head {layer}.{head} to weigh any cell but the first token's")
        queries, keys = (picked // n).tolist(), (picked % n).tolist()
        positions = sorted(set(queries) | set(keys))
        at = {p: i for i, p in enumerate(positions)}
        names, q, k = run.parts(positions)  # [P + 1, n_positions, d]
        q_side = torch.zeros(len(names), dtype=torch.float64)
        k_side = torch.zeros_like(q_side)
        total = 0.0
        for i, j in zip(queries, keys):
            q_i, k_j = q[:, at[i]], k[:, at[j]]  # [P + 1, d]
            q_side += scale * (q_i @ k_j.sum(0))  # each query part with the whole key
            k_side += scale * (k_j @ q_i.sum(0))  # each key part with the whole query
            total += float(scale * (q_i.sum(0) @ k_j.sum(0)))
    rows = []
    for p, name in enumerate(names):
        if name.startswith("head "):
            s_layer, s_head = (int(x) for x in name.split()[1].split("."))
            for kind, side in (("q", q_side), ("k", k_side)):
                rows.append(dict(sender_layer=s_layer, sender_head=s_head, kind=kind, contribution=float(side[p]),
                                 share=float(side[p]) / total if total else float("nan"), cells=len(queries)))
    return pd.DataFrame(rows)
