"""Writing text one token at a time with a **KV cache**, from scratch, and the proof that it computes the
attention of a full forward pass.

A decoder predicts token t+1 from tokens 0..t. Rerunning the whole prefix for every new token redoes
the same work: the keys and values of tokens 0..t−1 do not change when token t arrives (a causal
model's past never looks at its future). So each layer keeps a cache of them:

    prefill:   run the prompt once; each layer stores k and v of every prompt token
    each step: the newest token alone goes through the network, and in every layer
                   k, v = its key and value                 append them to the cache
                   scores = q · (every cached k)ᵀ × scale     one row: the new token against its context
                   weights = softmax(scores)
                   output = weights · (every cached v)      the weighted sum of the cached values

The cache holds 2 × layers × kv_heads × d_head numbers per token (:func:`cache_bytes`): a grouped-query
model (SmolLM2: 3 key/value heads for 9 query heads) holds 3× fewer than one with a key/value head per
query head. A layer with a sliding window of w keeps only the last w positions, in a ring buffer.

:func:`generate` returns a :class:`~probes.trace.GenerationTrace` (each step's attention row of every
layer and head, and its logits); :func:`replay` decodes a given sequence the same way and :func:`full_pass`
runs it in one pass: :func:`probes.generation.prove` compares the two (and Hugging Face's pass).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..attention_math import allowed_keys, group_of, repeat_kv
from ..errors import BadOption, InputTooLong, UnsupportedModel
from ..seam import reader
from ..tokens import readable_tokens
from ..trace import GenerationTrace
from . import build, flash as flash_kernel
from .attention import attention
from .family import DecoderNetwork
from .hooks import Pass
from .prenorm import net_logits

BYTES = 4  # fp32


def cache_bytes(n_layers: int, kv_heads: int, d_head: int, tokens: int, bytes_per_number: int = BYTES) -> int:
    """What a KV cache holds: 2 (k and v) × layers × kv_heads × d_head × tokens × bytes."""
    return 2 * n_layers * kv_heads * d_head * tokens * bytes_per_number


class KVCache:
    """Each layer's keys and values, ``[1, H_kv, capacity, d]``, and the position held in each slot.

    A layer without a window has room for every position (``capacity`` = the longest sequence asked
    for); a layer with a sliding window of w has w slots, and position p goes to slot p mod w (a ring
    buffer: the oldest key is overwritten once it falls out of the window). Slot order does not matter
    to attention, a sum over keys; each slot's position says which keys a query may see."""

    def __init__(self, n_layers: int, kv_heads: int, d_head: int, capacity: int, windows: list[int | None],
                 dtype=torch.float32, device="cpu"):
        self.windows = windows
        self.capacity = [min(capacity, w) if w else capacity for w in windows]
        self.k = [torch.zeros(1, kv_heads, c, d_head, dtype=dtype, device=device) for c in self.capacity]
        self.v = [torch.zeros_like(k) for k in self.k]
        self.positions = [torch.full((c,), -1, dtype=torch.long, device=device) for c in self.capacity]
        self.length = 0  # tokens seen (the position of the next one)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store k and v ``[1, H_kv, n, d]`` of positions length..length+n−1 and return what this layer's
        queries attend to: (keys, values, their positions). A prompt longer than a window attends to its
        own fresh keys (the ring keeps only the last w of them for the steps after)."""
        n, start, cap = k.shape[2], self.length, self.capacity[layer]
        new = torch.arange(start, start + n, device=k.device)
        if start + n <= cap:  # room: slots are positions
            self.k[layer][:, :, start:start + n] = k
            self.v[layer][:, :, start:start + n] = v
            self.positions[layer][start:start + n] = new
            end = start + n
            return self.k[layer][:, :, :end], self.v[layer][:, :, :end], self.positions[layer][:end]
        if self.windows[layer] is None:
            raise ValueError(f"the cache holds {cap} positions; position {start + n - 1} does not fit")
        if n > 1 and start > 0:
            raise ValueError("a windowed layer's ring buffer takes a prompt, then one token at a time")
        keep = slice(max(0, n - cap), n)  # the ring keeps the last w positions
        slots = new[keep] % cap
        self.k[layer][:, :, slots] = k[:, :, keep]
        self.v[layer][:, :, slots] = v[:, :, keep]
        self.positions[layer][slots] = new[keep]
        if n > 1:  # a whole prompt: its rows read its own keys (each query's window is masked below)
            return k, v, new
        return self.k[layer], self.v[layer], self.positions[layer]

    def held(self, layer: int) -> int:
        return int((self.positions[layer] >= 0).sum())

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values the cache holds now (filled slots only)."""
        # k and v have one shape: twice the keys' bytes
        return sum(2 * self.k[i][:, :, :self.held(i)].nbytes for i in range(len(self.k)))


def cached_pass(net, cache: KVCache, ids: torch.Tensor, rows: list | None = None,
                backend: str = "eager", hooks=None) -> torch.Tensor:
    """Run the tokens ``ids`` ``[1, n]`` (positions cache.length onward) through the network, each layer
    attending over its cache, and return the logits of the last one ``[vocab]``. With ``rows`` a list,
    the last token's attention row of every layer is appended to it (``[H, positions]``).

    ``backend``: ``eager`` (the formula, every probability of the step) or ``flash`` (our Triton kernel:
    output and logsumexp; the last row is recovered from them as exp(q·kᵀ·scale − lse)).

    The step is a pass of :class:`~probes.scratch.hooks.Pass` resumed at position ``cache.length`` (``start``) with
    the cache as its attention: ``hooks`` (:mod:`probes.scratch.hooks`) see the new tokens only (q, k and v of them,
    before k and v join the cache; the scores and pattern over the cache, eager only)."""
    n, start = ids.shape[1], cache.length
    queries = torch.arange(start, start + n, device=ids.device)
    final: list[torch.Tensor] = []

    def attend(i, q, k, v, spec, via: Pass):
        keys, values, positions = cache.append(i, k, v)  # append k and v to the cache
        allowed = positions[None, :] <= queries[:, None]  # the past (and itself); empty slots hold −1...
        allowed &= positions[None, :] >= 0  # ...and are never seen
        if spec.window is not None:
            allowed &= positions[None, :] > queries[:, None] - spec.window  # the last w positions only
        if backend == "flash" and spec.softcap is None:  # the kernel has no soft-cap: capped layers run the formula
            out, last = _flash(q, keys, values, allowed, spec)
        else:  # q of the new token(s) against every cached k, × scale, softmax, weighted sum of the cached v
            out, probs = attention(q, keys, values, allowed[None, None], spec.scale, via.edit_of("attn.scores", i),
                                   via.edit_of("attn.pattern", i), softcap=spec.softcap)
            last = probs[0, :, -1]
        if rows is not None:  # the last query's row, each weight at its key's position
            row = torch.zeros(last.shape[0], start + n, dtype=last.dtype, device=last.device)
            held = positions >= 0
            row[:, positions[held]] = last[:, held]
            rows.append(row)
        return out

    Pass(net, attend, hooks, then={"final": lambda x, name: final.append(x)})(
        ids, torch.ones_like(ids), None, logits=False, start=start)
    cache.length += n
    return net_logits(net, final[-1][0, -1])  # the last token's scores over the vocabulary


def _flash(q, keys, values, allowed, spec) -> tuple[torch.Tensor, torch.Tensor]:
    """The flash kernel on a cached step: one new token reads every allowed cached key (no causal mask
    needed: the cache holds only the past); a prompt attends to itself, causal. Returns the output and
    the last query's probabilities ``[H, keys]``, recovered from the logsumexp."""
    if q.shape[2] == 1:
        out, lse = flash_kernel.flash_attention(q, keys, values, key_mask=allowed, scale=spec.scale)
    else:
        out, lse = flash_kernel.flash_attention(q, keys, values, causal=True, window=spec.window, scale=spec.scale)
    k = repeat_kv(keys, group_of(q, keys))[0]  # [H, keys, d]
    scores = (q[0, :, -1:].float() @ k.float().transpose(-2, -1))[:, 0] * spec.scale  # q·kᵀ × scale
    last = torch.exp(scores - lse[0, :, -1, None]).masked_fill_(~allowed[-1], 0.0)  # = softmax, exactly
    return out, last.to(q.dtype)


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from the logits: the most likely one (``sample=False``, greedy), or a
    draw with a seeded generator from softmax(logits / temperature), keeping only the ``top_k`` most
    likely tokens (0: all) and the smallest set of them whose probability reaches ``top_p``."""

    sample: bool = False
    seed: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def check(self) -> None:
        if not 0 < self.temperature < float("inf"):
            raise BadOption(f"temperature must be a finite number above 0 (got {self.temperature}); use greedy "
                            "decoding for 0")
        if not 0 <= self.seed < 2**64:
            raise BadOption(f"the seed must be a whole number from 0 to 2^64 − 1 (got {self.seed})")
        if self.top_k < 0:
            raise BadOption(f"top-k must be 0 (off) or more (got {self.top_k})")
        if not 0 < self.top_p <= 1:
            raise BadOption(f"top-p must be in (0, 1] (got {self.top_p})")

    def describe(self) -> str:
        if not self.sample:
            return "greedy"
        parts = [f"seed {self.seed}", f"temperature {self.temperature:g}"]
        parts += [f"top-k {self.top_k}"] if self.top_k else []
        parts += [f"top-p {self.top_p:g}"] if self.top_p < 1 else []
        return "sampled (" + ", ".join(parts) + ")"


def filtered_logits(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """logits / temperature, with −inf outside the top-k and outside the top-p nucleus (the most likely
    token is always kept)."""
    scores = logits.float() / sampling.temperature
    if sampling.top_k and sampling.top_k < scores.numel():
        kth = scores.topk(sampling.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p < 1:
        ordered, order = scores.sort(descending=True)
        mass_before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # probability of the more likely ones
        drop = mass_before >= sampling.top_p  # the nucleus already reached p without this token
        scores = scores.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return scores


def next_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    if not sampling.sample:
        return int(logits.argmax())
    probs = filtered_logits(logits, sampling).softmax(-1)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def decoder(model):
    """The from-scratch network of a model that can write text, or :class:`UnsupportedModel` saying why not."""
    if getattr(model.config, "is_encoder_decoder", False):
        raise UnsupportedModel(f"{model.name} is an encoder-decoder: the workbench sees its encoder, and generation "
                               "here runs decoder-only models; pick a decoder such as smollm2 or gpt2")
    if not model.is_causal:
        raise UnsupportedModel(f"{model.name} is an encoder ({model.family.title if model.family else 'not a decoder'}"
                               "): it reads the whole text at once and does not write text; pick a decoder "
                               "such as smollm2 or gpt2")
    if not model.has_lm_head:
        raise UnsupportedModel(f"{model.name} has no language-model head, so it cannot choose a next token")
    if not model.scratch_supported:
        raise UnsupportedModel(f"generation runs on the from-scratch path, which cannot run {model.name}: "
                               f"{model.scratch_problem}")
    net = build(model)
    if not isinstance(net, DecoderNetwork):  # e.g. a BERT with is_decoder: causal, with a head, but no KV cache here
        # no list of families here: this floor cannot read the registry (probes.families.decoders() is the list)
        raise UnsupportedModel(f"{model.name} is a {model.family.title} with a causal mask, whose from-scratch network "
                               "has no KV cache: generation here runs the families whose network is a decoder (the "
                               "list: docs/generation.md); pick smollm2 or gpt2")
    return net


def windows_of(model) -> list[int | None]:
    return [model.family.window(model.config, i) for i in range(model.n_layers)]


def new_cache(model, capacity: int, dtype: torch.dtype = torch.float32) -> KVCache:
    return KVCache(model.n_layers, model.n_kv_heads, model.d_head, capacity, windows_of(model), dtype=dtype,
                   device=model.device)


def _tokens(model, ids: list[int]):
    """Readable tokens of an id sequence, with character offsets into its decoded text."""
    tok = model.tokenizer
    offsets, end = [], 0
    for i in range(len(ids)):
        nxt = len(tok.decode(ids[: i + 1]))
        offsets.append((end, nxt))
        end = nxt
    return readable_tokens(tok, ids, offsets, tok.decode(ids))


GENERATE_BACKENDS = ("eager", "flash")


@reader
def generate(model, prompt: str, max_new_tokens: int = 20, sampling: Sampling = Sampling(),
             stop_at_eos: bool = True, backend: str = "eager", hooks=None) -> GenerationTrace:
    """Write up to ``max_new_tokens`` tokens after ``prompt`` with the KV cache, keeping each step's
    attention row (every layer and head) and logits. Refuses an encoder, an empty prompt, and a prompt
    plus new tokens beyond the context window. ``backend="flash"`` runs each step's attention in our Triton
    kernel (CUDA, or Triton's interpreter); without it eager runs and the trace's ``note`` says so.
    ``hooks`` (:mod:`probes.scratch.hooks`): run at every step's pass (:func:`cached_pass`: the prompt's, then one
    new token's each), so an edit (a head's z zeroed) writes the text the edited model writes."""
    net = decoder(model)
    sampling.check()
    if backend not in GENERATE_BACKENDS:
        raise BadOption(f"unknown backend {backend!r} for generation: choose one of {', '.join(GENERATE_BACKENDS)}")
    note = ""
    if backend == "flash" and not (flash_kernel.available() and (model.device.type == "cuda"
                                                                  or flash_kernel.interpreting())):
        backend, note = "eager", "flash needs CUDA and Triton; ran eager instead (the same attention)"
    if max_new_tokens < 1:
        raise BadOption(f"ask for at least 1 new token (got {max_new_tokens})")
    limit = model.max_tokens
    shorten = "shorten the prompt (the new tokens need room in the context too)"
    try:
        ids = model.encode(prompt).input_ids[0].tolist()
    except InputTooLong as exc:
        raise InputTooLong(exc.n_tokens, limit, model.name, shorten) from None
    n = len(ids)
    if n + max_new_tokens - 1 > limit:  # the last token written is never fed back in
        if n >= limit:
            raise InputTooLong(n, limit, model.name, shorten)
        raise BadOption(f"the prompt is {n} token{'' if n == 1 else 's'} and {model.name} reads at most {limit}: ask "
                        f"for at most {limit - n + 1:,} new tokens (not {max_new_tokens:,})")
    cache = new_cache(model, n + max_new_tokens)
    gen = torch.Generator().manual_seed(sampling.seed) if sampling.sample else None
    eos = model.tokenizer.eos_token_id
    per_step, logits, sizes, seconds = [], [], [], []
    stopped = "length"
    fed = torch.tensor([ids], device=model.device)  # step 0 feeds the whole prompt (the prefill)
    with torch.inference_mode():
        for _step in range(max_new_tokens):
            t0 = time.perf_counter()
            rows: list[torch.Tensor] = []
            step_logits = cached_pass(net, cache, fed, rows, backend, hooks)
            token = next_token(step_logits, sampling, gen)
            seconds.append(time.perf_counter() - t0)
            per_step.append(torch.stack(rows).cpu())
            logits.append(step_logits.cpu())
            sizes.append(cache.nbytes)
            ids.append(token)
            if stop_at_eos and token == eos:
                stopped = "eos"
                break
            fed = torch.tensor([[token]], device=model.device)
    mha = [s // model.n_kv_heads * model.n_heads for s in sizes]
    return GenerationTrace(model=model.name, tokens=_tokens(model, ids), input_ids=torch.tensor(ids), prompt_length=n,
                           rows=per_step, logits=torch.stack(logits), cache_bytes=sizes, cache_bytes_mha=mha,
                           step_seconds=seconds, windows=windows_of(model), n_kv_heads=model.n_kv_heads,
                           stopped=stopped, backend=backend, note=note)


# -- what the proof (probes.generation.prove) runs: the same sequence cached, and in one full pass --------

def full_pass(net, ids: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Our network over the whole sequence ``ids`` ``[1, L]`` at once (no cache), the formula step by step:
    every layer's probabilities ``[H, L, L]`` and the logits ``[L, vocab]``."""
    mask = torch.ones_like(ids)
    probs, final = [], []

    def attend(i, q, k, v, spec, via: Pass):
        out, p = attention(q, k, v, allowed_keys(mask, True, window=spec.window), scale=spec.scale,
                           softcap=spec.softcap)
        probs.append(p[0])
        return out

    Pass(net, attend, then={"final": lambda x, name: final.append(x)})(ids, mask, None, logits=False)
    return probs, net_logits(net, final[-1][0])


def replay(net, model, ids: torch.Tensor, prompt_length: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Cached decoding of a given sequence (prefill ``prompt_length`` tokens, then one token a step): each
    step's rows and logits, as :func:`generate` computes them, without choosing tokens."""
    cache = new_cache(model, ids.shape[1], net.lm_head.dtype)
    per_step, logits = [], []
    fed = ids[:, :prompt_length]
    for position in range(prompt_length, ids.shape[1] + 1):
        rows: list[torch.Tensor] = []
        logits.append(cached_pass(net, cache, fed, rows))
        per_step.append(torch.stack(rows))
        fed = ids[:, position:position + 1]
    return per_step, torch.stack(logits)


def network64(model):
    """A float64 copy of the model's from-scratch network (for the proof; built each time, not kept)."""
    weights = {k: v.detach().to(torch.float64) for k, v in model.hf.state_dict().items()}
    return model.family.network(weights, model.config, model.name)
