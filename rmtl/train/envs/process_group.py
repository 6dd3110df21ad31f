"""Parallel environments: a vec env whose sub-envs live in a few worker processes.

SB3's SubprocVecEnv starts one process per env (16 for the paper's PPO); on a machine
with fewer cores than envs that is 16 GL contexts and 16 copies of torch fighting for
the same cores. :class:`ProcessGroupVecEnv` puts ``n_envs / workers`` envs in each of
``workers`` processes (a DummyVecEnv each, with SB3's auto-reset and
``terminal_observation``), and sizes every worker's thread pools (OpenMP, MKL, torch,
Mesa's llvmpipe rasteriser) to ``threads_per_worker`` before anything starts them, so
nothing oversubscribes (:func:`rmtl.env.threads.worker_thread_env`: the rasteriser runs
in the worker's own thread). ``env_method`` calls (rendering the reward views) run in all
workers at once. Env ``i`` is env ``i % per_worker`` of worker ``i // per_worker``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Any
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import CloudpickleWrapper, VecEnv, VecEnvIndices

from rmtl.env.threads import worker_thread_env


def _worker(remote, parent_remote, fns_wrapper: CloudpickleWrapper, threads: int) -> None:
    os.environ.update(worker_thread_env(threads))
    parent_remote.close()
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv(fns_wrapper.var)
    try:
        while True:
            cmd, data = remote.recv()
            if cmd == "step":
                venv.step_async(data)
                remote.send(venv.step_wait())
            elif cmd == "reset":
                seeds, options = data
                venv._seeds, venv._options = list(seeds), list(options)
                remote.send(venv.reset())
            elif cmd == "env_method":
                name, args, kwargs, idx = data
                remote.send(venv.env_method(name, *args, indices=idx, **kwargs))
            elif cmd == "get_attr":
                remote.send(venv.get_attr(data[0], indices=data[1]))
            elif cmd == "set_attr":
                venv.set_attr(data[0], data[1], indices=data[2])
                remote.send(None)
            elif cmd == "is_wrapped":
                remote.send(venv.env_is_wrapped(data[0], indices=data[1]))
            elif cmd == "has_attr":
                remote.send(all(hasattr(e, data) for e in venv.envs))
            elif cmd == "spaces":
                remote.send((venv.observation_space, venv.action_space))
            elif cmd == "close":
                venv.close()
                remote.send(None)
                break
            else:
                raise NotImplementedError(f"unknown command {cmd!r}")
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        remote.close()


def default_workers(n_envs: int) -> int:
    """One worker per available core, at most one per env."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(int(n_envs), cores))


class ProcessGroupVecEnv(VecEnv):
    """``len(env_fns)`` envs spread evenly over ``workers`` processes (see module docstring)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], workers: int | None = None,
                 threads_per_worker: int = 1, start_method: str | None = None):
        n = len(env_fns)
        workers = default_workers(n) if workers is None else max(1, min(int(workers), n))
        bounds = np.linspace(0, n, workers + 1).round().astype(int)
        self._groups = [list(range(bounds[w], bounds[w + 1])) for w in range(workers)]
        self._where = [(w, j) for w, g in enumerate(self._groups) for j in range(len(g))]
        method = start_method or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
        ctx = mp.get_context(method)
        self.remotes, self._procs = [], []
        for g in self._groups:
            remote, work = ctx.Pipe()
            fns = CloudpickleWrapper([env_fns[i] for i in g])
            p = ctx.Process(target=_worker, args=(work, remote, fns, int(threads_per_worker)), daemon=True)
            p.start()
            work.close()
            self.remotes.append(remote)
            self._procs.append(p)
        self.workers = workers
        self.threads_per_worker = int(threads_per_worker)
        self.closed = False
        self.remotes[0].send(("spaces", None))
        obs_space, act_space = self.remotes[0].recv()
        super().__init__(n, obs_space, act_space)

    # ------------------------------------------------------------------ stepping
    def step_async(self, actions: np.ndarray) -> None:
        for remote, g in zip(self.remotes, self._groups):
            remote.send(("step", actions[g[0]:g[-1] + 1]))

    def step_wait(self):
        results = [r.recv() for r in self.remotes]
        obs = _concat_obs([res[0] for res in results])
        rews = np.concatenate([res[1] for res in results])
        dones = np.concatenate([res[2] for res in results])
        infos = [info for res in results for info in res[3]]
        return obs, rews, dones, infos

    def reset(self):
        for remote, g in zip(self.remotes, self._groups):
            remote.send(("reset", ([self._seeds[i] for i in g], [self._options[i] for i in g])))
        obs = _concat_obs([r.recv() for r in self.remotes])
        self._reset_seeds()
        self._reset_options()
        return obs

    def close(self) -> None:
        if self.closed:
            return
        for r in self.remotes:
            try:
                r.send(("close", None))
                r.recv()
            except (BrokenPipeError, EOFError):
                pass
        for p in self._procs:
            p.join(timeout=10)
        self.closed = True

    # ------------------------------------------------------------------ per-env calls
    def _scatter(self, indices: VecEnvIndices) -> tuple[list[int], dict[int, list[int]]]:
        idx = self._get_indices(indices)
        idx = list(range(self.num_envs)) if idx is None else [int(i) for i in idx]
        local: dict[int, list[int]] = {}
        for i in idx:
            w, j = self._where[i]
            local.setdefault(w, []).append(j)
        return idx, local

    def _call(self, cmd: str, make: Callable[[list[int]], tuple], indices: VecEnvIndices) -> list[Any]:
        idx, local = self._scatter(indices)
        for w, js in local.items():
            self.remotes[w].send((cmd, make(js)))
        by_env: dict[int, Any] = {}
        for w, js in local.items():
            for j, value in zip(js, self.remotes[w].recv() or [None] * len(js)):
                by_env[self._groups[w][j]] = value
        return [by_env[i] for i in idx]

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        return self._call("env_method", lambda js: (method_name, method_args, method_kwargs, js), indices)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", lambda js: (attr_name, js), indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call("set_attr", lambda js: (attr_name, value, js), indices)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self._call("is_wrapped", lambda js: (wrapper_class, js), indices)

    def has_attr(self, attr_name: str) -> bool:
        for r in self.remotes:
            r.send(("has_attr", attr_name))
        return all(r.recv() for r in self.remotes)

    def get_images(self):
        return [None] * self.num_envs

    def _get_indices(self, indices: VecEnvIndices):
        if indices is None:
            return None
        if isinstance(indices, (int, np.integer)):
            return [int(indices)]
        return list(indices)


def _concat_obs(parts: list[Any]) -> Any:
    if isinstance(parts[0], dict):
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return np.concatenate(parts)
