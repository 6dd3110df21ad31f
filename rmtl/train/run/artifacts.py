"""Run-directory artifacts in formats that cannot run code when loaded.

A run directory may come from someone else (a shared drive, a download), so loading one
must never execute code from it. Everything rmtl writes itself is JSON, CSV, YAML or a
torch file of tensors and plain values loaded with ``torch.load(weights_only=True)``:

- ``vecnormalize.json``: VecNormalize observation statistics (mean, var, count per key)
  and its settings (:func:`save_normalizer`, :func:`load_normalizer`,
  :func:`restore_normalizer`). Older runs wrote ``vecnormalize.pkl`` (a pickle); it is
  refused with one line, never unpickled.
- ``manager.pt``, ``manager_bc.pt``, the VLM trainer's ``checkpoint.pt``: state dicts and
  plain values (:func:`load_torch_state`).

SB3's own ``model.zip`` is SB3's format, loaded by ``PPO.load`` (docs/errors.md).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from rmtl.errors import ConfigError
from storage.whole_file import write_file_whole

NORMALIZER_FILE = "vecnormalize.json"
LEGACY_NORMALIZER_FILE = "vecnormalize.pkl"
NORMALIZER_FORMAT = "rmtl.vecnormalize"
NORMALIZER_VERSION = 1
_SETTINGS = ("norm_obs", "norm_reward", "clip_obs", "clip_reward", "gamma", "epsilon")


def _rms_dict(rms: Any) -> dict[str, Any]:
    mean = np.asarray(rms.mean, dtype=np.float64)
    return {"shape": list(mean.shape), "mean": mean.reshape(-1).tolist(),
            "var": np.asarray(rms.var, dtype=np.float64).reshape(-1).tolist(), "count": float(rms.count)}


def _rms(d: dict[str, Any], where: Path, key: str) -> Any:
    from stable_baselines3.common.running_mean_std import RunningMeanStd

    try:
        shape = tuple(int(x) for x in d["shape"])
        mean = np.asarray(d["mean"], dtype=np.float64).reshape(shape)
        var = np.asarray(d["var"], dtype=np.float64).reshape(shape)
        count = float(d["count"])
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{where} is corrupt: statistics of '{key}' are malformed ({e}); "
                          f"restore it from a copy or retrain") from None
    rms = RunningMeanStd(shape=shape)
    rms.mean, rms.var, rms.count = mean, var, count
    return rms


def save_normalizer(normalizer: Any, directory: str | Path) -> Path:
    """Write the statistics and settings of an SB3 ``VecNormalize`` as ``vecnormalize.json``."""
    obs = normalizer.obs_rms
    data: dict[str, Any] = {
        "format": NORMALIZER_FORMAT, "version": NORMALIZER_VERSION,
        **{k: (bool(getattr(normalizer, k)) if k.startswith("norm") else float(getattr(normalizer, k)))
           for k in _SETTINGS},
        "norm_obs_keys": list(normalizer.norm_obs_keys) if getattr(normalizer, "norm_obs_keys", None) else None,
        "obs_rms": ({k: _rms_dict(v) for k, v in obs.items()} if isinstance(obs, dict) else _rms_dict(obs)),
        "obs_rms_is_dict": isinstance(obs, dict),
        "ret_rms": _rms_dict(normalizer.ret_rms),
    }
    path = Path(directory) / NORMALIZER_FILE
    write_file_whole(path, json.dumps(data, indent=1))
    return path


def _legacy_refused(path: Path) -> ConfigError:
    return ConfigError(
        f"{path} is a pickle (VecNormalize statistics written by an older rmtl); rmtl does not load pickles, "
        f"because loading one can run any code it contains: retrain this run, or start a new run directory")


def normalizer_stats(directory: str | Path) -> dict[str, Any] | None:
    """The parsed ``vecnormalize.json`` of a checkpoint directory, None if it has none.
    A legacy ``vecnormalize.pkl`` is refused (ConfigError), never unpickled."""
    d = Path(directory)
    path = d / NORMALIZER_FILE
    if not path.is_file():
        if (d / LEGACY_NORMALIZER_FILE).is_file():
            raise _legacy_refused(d / LEGACY_NORMALIZER_FILE)
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} is not valid JSON ({e}); restore it from a copy or retrain") from None
    if not isinstance(data, dict) or data.get("format") != NORMALIZER_FORMAT:
        raise ConfigError(f"{path} is not an rmtl VecNormalize file (format {data.get('format') if isinstance(data, dict) else None!r})")
    if int(data.get("version", 0)) > NORMALIZER_VERSION:
        raise ConfigError(f"{path} has format version {data['version']}, newer than this rmtl reads; upgrade rmtl")
    return data


def _obs_rms(data: dict[str, Any], where: Path) -> Any:
    if data.get("obs_rms_is_dict"):
        return {k: _rms(v, where, k) for k, v in data["obs_rms"].items()}
    return _rms(data["obs_rms"], where, "obs")


def restore_normalizer(normalizer: Any, directory: str | Path) -> bool:
    """Load a checkpoint's statistics into a live ``VecNormalize`` (resuming training);
    False if the checkpoint has none."""
    data = normalizer_stats(directory)
    if data is None:
        return False
    where = Path(directory) / NORMALIZER_FILE
    normalizer.obs_rms = _obs_rms(data, where)
    if "ret_rms" in data:
        normalizer.ret_rms = _rms(data["ret_rms"], where, "return")
    return True


class ObsNormalizer:
    """Frozen observation normalisation of a checkpoint: what SB3's
    ``VecNormalize.normalize_obs`` computes, without a VecNormalize or its env."""

    training = False

    def __init__(self, data: dict[str, Any], where: Path):
        self.norm_obs = bool(data.get("norm_obs", True))
        self.norm_obs_keys = data.get("norm_obs_keys")
        self.clip_obs = float(data.get("clip_obs", 10.0))
        self.epsilon = float(data.get("epsilon", 1e-8))
        self.obs_rms = _obs_rms(data, where)

    def _normalize(self, obs: np.ndarray, rms: Any) -> np.ndarray:
        return np.clip((obs - rms.mean) / np.sqrt(rms.var + self.epsilon), -self.clip_obs, self.clip_obs)

    def normalize_obs(self, obs: Any) -> Any:
        if not self.norm_obs:
            return obs
        if isinstance(obs, dict) and isinstance(self.obs_rms, dict):
            out = dict(obs)
            for key in self.norm_obs_keys or list(self.obs_rms):
                out[key] = self._normalize(obs[key], self.obs_rms[key]).astype(np.float32)
            return out
        return self._normalize(obs, self.obs_rms).astype(np.float32)


def load_normalizer(directory: str | Path) -> ObsNormalizer | None:
    """The frozen observation normaliser of a checkpoint directory (None if it has none)."""
    data = normalizer_stats(directory)
    return None if data is None else ObsNormalizer(data, Path(directory) / NORMALIZER_FILE)


def load_torch_state(path: str | Path, what: str, fix: str, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain Python values only, so
    loading never runs code from the file. Anything else is one ConfigError line naming
    ``what`` the file is and ``fix``, how to go on."""
    import torch

    p = Path(path)
    try:
        return torch.load(p, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        why = " ".join(str(err).split()).split(" Check the documentation")[0][:200]
        with open(p, "rb") as f:
            head = f.read(2)
        # objects are refused by name (a GLOBAL); bytes that are neither torch's zip nor a pickle (protocol 2+)
        # are a damaged file or another kind of file, not code
        if "global" not in str(err).lower() or not (head == b"PK" or head[:1] == b"\x80"):
            raise ConfigError(f"{p} ({what}) is not a readable torch file (damaged, or not written by torch); "
                              f"{fix}") from None
        raise ConfigError(f"{p} ({what}) holds Python objects besides tensors and plain values, so rmtl does not "
                          f"load it (loading them could run code; it may not have been written by rmtl): {fix} "
                          f"[{why}]") from None
    except (KeyError, IndexError, TypeError):  # what torch's reader raises on some bytes that are no torch file
        raise ConfigError(f"{p} ({what}) is not a readable torch file (damaged, or not written by torch); "
                          f"{fix}") from None
    except (RuntimeError, EOFError, ValueError) as err:
        raise ConfigError(f"{p} ({what}) is not a readable torch file ({' '.join(str(err).split())[:160]}); "
                          f"{fix}") from None
    except OSError as err:
        if err.filename is not None:  # the file itself cannot be opened: the operating system's line
            raise
        # torch's zip reader failing on the bytes (a truncated file: "[Errno 22] Invalid argument"), not the path
        raise ConfigError(f"{p} ({what}) is not a readable torch file (truncated or damaged: "
                          f"{err.strerror or err}); {fix}") from None
