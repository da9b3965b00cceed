"""Every head profiled over a real corpus: label-free statistics and top examples, on one process or on Ray.

* :mod:`.reader`: a .txt / .jsonl / .parquet corpus, streamed, cut into chunks and model-sized windows;
* :mod:`.examples`: each head's strongest (query, key) entries, kept sparsely, with their text;
* :mod:`.run`: the chunks scored and checkpointed, combined into one table (all models) and one examples file;
* :mod:`.ray_pool`: the same chunks on a pool of Ray actors (each loads the model once and keeps it for the run).
"""
