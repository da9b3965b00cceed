"""What if the model attended less: KV-cache eviction policies and static sparse patterns, run on the from-scratch
pass, measured on a real model head by head.

- :mod:`probes.kv.policies`: the policies, one class each in one registry, by name (``full``, ``window:W``,
  ``sinks:S+window:W``, ``h2o:B``, ``tova:B``, ``snapkv:B``, ``strided:C+window:W``), each with its rule for what to
  evict;
- :mod:`probes.kv.cache`: the cache that forgets, each layer's slots kept as its heads' policies say;
- :mod:`probes.kv.stream`: streamed perplexity token by token, the bytes held, what each head keeps, and each
  head's sensitivity (the loss change when only its cache is cut);
- :mod:`probes.kv.compress`: a prompt compressed once, as kvpress's presses do (StreamingLLM, SnapKV, TOVA, observed
  attention), from any Trace, eager or lazy;
- :mod:`probes.kv.sweep`: budget sweeps as tables people read (the policy a kind names at a budget, perplexity and
  bytes, what a head kept, each head cut alone). ``probes.kv.views`` is its old, deprecated name.
"""

from .policies import Policy, parse, parse_list

__all__ = ["Policy", "parse", "parse_list"]
