"""Reward-quality questions answered offline from a store's embeddings: the alpha sweep, the
per-view analysis, queries, return ranking, prompt studies, rollout diagnosis, the hacking
battery's family returns, and their plots. Built on ``pipeline.stores`` (and ``pipeline.jobs``);
the reward replay they run is ``rmtl.reward.replay``."""
