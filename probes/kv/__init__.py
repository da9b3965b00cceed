"""What if the model attended less: KV-cache eviction policies and static sparse patterns, run on the from-scratch
pass, measured on a real model head by head.

- :mod:`probes.kv.policies`: the policies by name (``full``, ``window:W``, ``sinks:S+window:W``, ``h2o:B``,
  ``tova:B``, ``snapkv:B``, ``strided:C+window:W``);
- :mod:`probes.kv.cache`: the cache that forgets, and each policy's rule for what to evict;
- :mod:`probes.kv.stream`: streamed perplexity token by token, the bytes held, what each head keeps, and each
  head's sensitivity (the loss change when only its cache is cut);
- :mod:`probes.kv.compress`: a prompt compressed once, as kvpress's presses do (StreamingLLM, SnapKV, TOVA, observed
  attention), from any Trace, eager or lazy.
"""

from .policies import Policy, parse, parse_list

__all__ = ["Policy", "parse", "parse_list"]
