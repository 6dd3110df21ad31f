"""The jobs that fill a store: roll episodes out (``rollout``), render them (``render``), embed the
frames and prompts (``embed``, ``embed_text``), the main job doing all three (``render_and_embed``),
and the gate set of stores a reward model is checked on (``gate_set``). Built on ``pipeline.stores``."""
