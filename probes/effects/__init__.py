"""Beyond attention weights: does a head matter, and what does it write into the residual stream?

* :mod:`.ablation`: interventions on head outputs (zero, mean over a reference set, patched from another
  input), every single-head ablation of a text as batched passes, and what each changed (:mod:`.measures`);
* :mod:`.importance`: head importance over a data set (Michel et al. 2019: the gradient of the loss with
  respect to a gate on each head), with the exact ablation effect beside it, as a tidy table;
* :mod:`.norms`: value-weighted attention norms ‖α_ij·f(x_j)‖ (Kobayashi et al. 2020), read from a Trace;
* :mod:`.rollout`: attention rollout (Abnar & Zuidema 2020), read from a Trace;
* :mod:`.attribution`: direct logit attribution of each head (decoders);
* :mod:`.lens`: the logit lens (decoders): each layer's residual stream read through the final norm and the
  unembedding (top tokens and their probabilities; the last layer's equals the model's logits), and each head's
  direct effect on the logits (the final norm frozen, as in the attribution);
* :mod:`.qk`: QK attribution, why a head attends where it does: one pre-softmax score split exactly into what
  wrote the query × what wrote the key (embeddings, earlier heads and MLPs, biases; the norms frozen);
* :mod:`.pairs`: minimal pairs, two texts that differ in a few words, compared head by head.
* :mod:`.compose`: composition scores (Elhage et al. 2021), from the weights alone: how much an earlier head's
  output a later head reads as its query, key or value, beside a random baseline.
* :mod:`.paths`: path patching, each earlier head's output on a corrupted text patched into only one receiver
  head's query, key or value on the clean text (batched: one copy per sender), and what moved: the receiver's
  attention pattern and the loss.

The interventions run the from-scratch network (:func:`probes.scratch.run_with_hooks` with hook points, eager
attention, the same numbers as the Trace's); norms and rollout only read a Trace and the output projection's weights.
"""
