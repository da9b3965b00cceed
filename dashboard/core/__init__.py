"""What the app's pages share: the model and the trace of the sidebar's input (``models``, ``trace``), the question
asked of the text (``questions``, ``verdicts``), the ablation grid, parity, a deployment's budgets, the link's core
and the page registry (``state``, ``pages``), the widgets and messages every page uses (``ui``, ``words``) and the
chart primitives (``charts``, ``token_charts``, ``grid_charts``, ``lens_charts``). It imports the library, never a
page (pyproject.toml: the import contracts)."""
