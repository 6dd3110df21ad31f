"""State-cache benchmark: reward throughput with the cache warm vs rendering and
embedding every step, with hit rate and reward error against fresh rendering.

For each policy (scripted expert with noise, random actions):

1. a warm cache: ``--index-episodes`` episodes of that policy (seeds disjoint from the
   evaluation episodes) rendered, embedded and indexed (pipeline.jobs.render / embed,
   storage.cache); reused when the store already exists;
2. ``--envs`` environments step ``--steps`` times each (episodes of the policy, reset
   on termination), replayed identically for every mode below; per batch step the
   reward path runs: look up / render / embed the B states, score every phase per view,
   take the active phase's view mean;
   - ``fresh``: render all views of every env and embed them (VLMEmbeddingSource);
   - ``cached r=R``: CachedEmbeddingSource over the warm cache at radius R;
   - ``fill`` / ``revisit``: an empty store filled by the first replay (append=True,
     r=0), then the same steps again (every state stored: the all-hit upper bound).
3. reported per mode: hit rate, reward env-steps/s (median over batch steps of the
   reward time, and the total), speed-up over fresh, and the mean absolute error of the
   active score against the fresh pass, over all steps and over hits only.

    python bench/cache.py [--model rmtl-fetch-tiny@random] [--views 6] [--envs 8] [--steps 30]
                          [--radii 0 0.002 0.005 0.01 0.02] [--out results/bench/cache.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import rmtl  # noqa: F401  (MUJOCO_GL before mujoco)
from rmtl.tasks.fetch_lift.cameras import VIEW_NAMES
from rmtl.provenance import portable_values, run_record


def build_index_store(path: Path, policy: str, episodes: int, views, resolution: int, vlm, seed: int) -> dict:
    from pipeline.jobs.embed import embed_store
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.rollout import RolloutConfig
    from storage.cache import StateCache
    from storage.dataset import DatasetStore

    t = time.perf_counter()
    cfg = RolloutConfig.make(episodes=episodes, policy=policy, views=views, resolution=resolution, seed=seed)
    render_to_store(path, cfg, progress=False)
    embed_store(path, vlm, progress=False)
    with DatasetStore.open(path) as st:
        cache = StateCache.open(st, vlm.model_id)
        return {"store": str(path), "rows": st.num_rows, "episodes": episodes, "cache_status": cache.status,
                "seconds": time.perf_counter() - t}


def empty_store(path: Path, views, resolution: int, vlm):
    """A new store (no frames) with an empty embeddings array of the model, ready for live appends."""
    from rmtl.tasks.fetch_lift.layout import store_description
    from storage.dataset import DatasetStore

    st = DatasetStore.create(path, views=views, resolution=resolution, frames=False, overwrite=True, **store_description(),
                             provenance={"policy": "live", "bench": "cache"})
    st.add_embeddings(vlm.model_id, 0, np.zeros((0, len(views), vlm.embed_dim), np.float32))
    st.close()


class Replay:
    """B envs stepping episodes of a policy; identical on every run()."""

    def __init__(self, policy: str, n_envs: int, steps: int, views, resolution: int, seed: int):
        from pipeline.jobs.rollout import RolloutConfig
        from rmtl.tasks.fetch_lift.env import FetchPickAndLiftEnv

        self.cfg = RolloutConfig.make(episodes=1, policy=policy, views=views, resolution=resolution, seed=seed)
        self.envs = [FetchPickAndLiftEnv(views=views, resolution=resolution) for _ in range(n_envs)]
        self.n, self.steps, self.views, self.resolution = n_envs, steps, tuple(views), resolution

    def _start(self, i: int, k: int):
        from pipeline.jobs.rollout import make_policy, plan_episode

        plan = plan_episode(self.cfg, i + self.n * k)
        env = self.envs[i]
        obs, _ = env.reset(seed=plan.reset_seed, options={"difficulty": plan.difficulty})
        return obs, make_policy(self.cfg, plan, env)

    def run(self, source, scorer) -> dict:
        from rmtl.reward.cached_source import env_renderer
        from rmtl.reward.phase import RulePhaseSelector
        from rmtl.tasks import get_task

        render = env_renderer(self.envs, self.views, self.resolution)
        select = RulePhaseSelector(get_task("fetch_lift").phases)
        started = [self._start(i, 0) for i in range(self.n)]
        obs = [o for o, _ in started]
        policies = [p for _, p in started]
        episode_k = [0] * self.n
        states_log, act_log, hit_log, t_reward, t_sim = [], [], [], [], []
        for _ in range(self.steps):
            t0 = time.perf_counter()
            done = []
            for i, env in enumerate(self.envs):
                obs[i], _, term, trunc, _ = env.step(policies[i](obs[i]))
                done.append(term or trunc)  # the terminal state is scored, then the env resets
            states = np.stack([env.state for env in self.envs])
            t1 = time.perf_counter()
            if hasattr(source, "lookup"):
                res = source.lookup(states, render)
                emb, hit = res.embeddings, res.hit
            else:
                emb, hit = source(states, render), np.zeros(self.n, bool)
            active = scorer(emb).active(select(states))
            t2 = time.perf_counter()
            for i in map(int, np.flatnonzero(done)):
                episode_k[i] += 1
                obs[i], policies[i] = self._start(i, episode_k[i])
            t_sim.append(t1 - t0)
            t_reward.append(t2 - t1)
            states_log.append(states)
            act_log.append(active)
            hit_log.append(hit)
        return {"states": np.stack(states_log), "active": np.stack(act_log), "hit": np.stack(hit_log),
                "t_reward": np.asarray(t_reward), "t_sim": np.asarray(t_sim)}

    def close(self):
        for env in self.envs:
            env.close()


def summarise(mode: str, radius, run: dict, fresh: dict | None, n_envs: int) -> dict:
    med = statistics.median(run["t_reward"].tolist())
    row = {
        "mode": mode, "radius": radius, "env_steps": int(run["active"].size),
        "hit_rate": float(run["hit"].mean()),
        "reward_steps_per_s_median": n_envs / med,
        "reward_steps_per_s_total": run["active"].size / float(run["t_reward"].sum()),
        "sim_steps_per_s_median": n_envs / statistics.median(run["t_sim"].tolist()),
        "end_to_end_steps_per_s_median": n_envs / statistics.median((run["t_reward"] + run["t_sim"]).tolist()),
    }
    if fresh is not None:
        same = float(np.abs(run["states"] - fresh["states"]).max())
        err = np.abs(run["active"] - fresh["active"])
        row.update({
            "replay_max_state_diff": same,
            "mean_abs_error_all": float(err.mean()),
            "mean_abs_error_hits": float(err[run["hit"]].mean()) if run["hit"].any() else None,
            "max_abs_error": float(err.max()),
            "speedup_vs_fresh": row["reward_steps_per_s_median"] / (n_envs / statistics.median(fresh["t_reward"].tolist())),
        })
    return row


def bench_policy(policy: str, args, vlm, scorer_for, workdir: Path) -> dict:
    from rmtl.reward.cached_source import CachedEmbeddingSource
    from rmtl.reward.source import VLMEmbeddingSource
    from rmtl.tasks import get_task

    task = get_task("fetch_lift")
    keys = {"key_spec": task.key_spec, "phase_labels": task.phases}
    views = VIEW_NAMES[: args.views]
    res = args.resolution or vlm.image_size
    index_path = workdir / f"index_{policy}_{args.views}v_{res}px.zarr"
    index = build_index_store(index_path, policy, args.index_episodes, views, res, vlm, seed=args.index_seed)
    replay = Replay(policy, args.envs, args.steps, views, res, seed=args.seed)
    try:
        scorer = scorer_for(index_path)
        fresh = replay.run(VLMEmbeddingSource(vlm, args.batch), scorer)
        rows = [summarise("fresh", None, fresh, None, args.envs)]
        for r in args.radii:
            with CachedEmbeddingSource.open(index_path, vlm, radius=r, views=views, **keys) as src:
                rows.append(summarise("cached", r, replay.run(src, scorer), fresh, args.envs))
        fill_path = workdir / f"revisit_{policy}.zarr"
        empty_store(fill_path, views, res, vlm)
        with CachedEmbeddingSource.open(fill_path, vlm, radius=0.0, views=views, append=True, **keys) as src:
            rows.append(summarise("fill (append misses)", 0.0, replay.run(src, scorer), fresh, args.envs))
        with CachedEmbeddingSource.open(fill_path, vlm, radius=0.0, views=views, **keys) as src:
            rows.append(summarise("revisit", 0.0, replay.run(src, scorer), fresh, args.envs))
    finally:
        replay.close()
    return {"policy": policy, "index": index, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="rmtl-fetch-tiny@random", help="VLM spec (default until trained weights ship)")
    ap.add_argument("--views", type=int, default=6, choices=range(1, len(VIEW_NAMES) + 1))
    ap.add_argument("--resolution", type=int, default=None, help="frame size (default: the model's input size)")
    ap.add_argument("--envs", type=int, default=8, help="environments stepped in lockstep (the reward batch)")
    ap.add_argument("--steps", type=int, default=30, help="batch steps per mode")
    ap.add_argument("--index-episodes", type=int, default=16, help="episodes per policy in the warm cache")
    ap.add_argument("--radii", type=float, nargs="+", default=[0.0, 0.002, 0.005, 0.01, 0.02])
    ap.add_argument("--policies", nargs="+", default=["expert", "random"], choices=["expert", "random"])
    ap.add_argument("--batch", type=int, default=64, help="images per VLM call on the fresh path")
    ap.add_argument("--alpha", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0, help="base seed of the evaluated episodes")
    ap.add_argument("--index-seed", type=int, default=100000, help="base seed of the cached episodes")
    ap.add_argument("--workdir", type=Path, default=None, help="where index stores live (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=Path("results/bench/cache.json"))
    args = ap.parse_args()

    import torch

    from pipeline.stores.stored_text import stored_text_embeddings
    from rmtl.tasks import get_task
    from rmtl.reward.scorer import PhasedScorer
    from rmtl.vlm import load_vlm
    from storage.cache import set_faiss_threads
    from storage.dataset import DatasetStore

    set_faiss_threads(1)
    torch.manual_seed(0)  # @random weights: one draw, used for the index and every mode
    vlm = load_vlm(args.model)
    views = VIEW_NAMES[: args.views]

    def scorer_for(store_path):
        with DatasetStore.open(store_path) as st:
            return PhasedScorer(stored_text_embeddings(st, vlm.model_id, get_task().prompts()), args.alpha, views)

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rmtl-bench-cache-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        results = [bench_policy(p, args, vlm, scorer_for, workdir) for p in args.policies]
    out = {"model": args.model, "model_id": vlm.model_id, "views": list(views),
           "resolution": args.resolution or vlm.image_size, "envs": args.envs, "steps": args.steps,
           "index_episodes": args.index_episodes, "alpha": args.alpha, "statistic": "median over batch steps",
           "torch_threads": torch.get_num_threads(), "seconds": time.perf_counter() - t0,
           "policies": results, "record": run_record()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(portable_values(out), indent=2))

    print(f"model {args.model}, {args.views} views at {out['resolution']} px, {args.envs} envs x {args.steps} steps, "
          f"alpha {args.alpha}")
    head = f"{'policy':<7} {'mode':<21} {'radius':>6} {'hit':>6} {'reward st/s':>11} {'speedup':>8} {'|err| all':>10} {'|err| hits':>10} {'e2e st/s':>9}"
    print(head)
    f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
    for res in results:
        print(f"  cache: {res['index']['rows']} rows from {res['index']['episodes']} {res['policy']} episodes")
        for r in res["rows"]:
            print(f"{res['policy']:<7} {r['mode']:<21} {f(r['radius'], '>6.3f')} {r['hit_rate']:>6.2f} "
                  f"{r['reward_steps_per_s_median']:>11.1f} {f(r.get('speedup_vs_fresh'), '>8.2f')} "
                  f"{f(r.get('mean_abs_error_all'), '>10.2e')} {f(r.get('mean_abs_error_hits'), '>10.2e')} "
                  f"{r['end_to_end_steps_per_s_median']:>9.1f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
