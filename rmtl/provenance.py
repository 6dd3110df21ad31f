"""Where data goes, and what every run records next to its outputs (config, seed,
versions, git commit), so any result can be traced and reproduced."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

DATA_DIR_ENV = "RMTL_DATA_DIR"
"""Environment variable that overrides the default data directory ``./data``."""

TRACKED_PACKAGES = (
    "rmtl", "torch", "open_clip_torch", "mujoco", "gymnasium", "gymnasium-robotics",
    "stable-baselines3", "zarr", "faiss-cpu", "dask", "prefect", "numpy",
)


def data_dir(override: str | Path | None = None) -> Path:
    """The data directory: ``override``, else ``$RMTL_DATA_DIR``, else ``./data``."""
    if override is not None and not str(override).strip():  # else '' would silently mean the default
        from rmtl.errors import ConfigError

        raise ConfigError("--data-dir is empty; give a directory path, or leave the option out for "
                          f"${DATA_DIR_ENV} (else ./data)")
    p = Path(override) if override else Path(os.environ.get(DATA_DIR_ENV, "data"))
    return p.expanduser().resolve()


DATA_DIR_MARK = "$" + DATA_DIR_ENV
"""How records write a path inside the data directory: ``$RMTL_DATA_DIR/stores/x.zarr``."""


def source_root() -> Path | None:
    """The git work tree this package runs from, else the one around the working directory;
    None outside both. Records write paths inside it relative to it."""
    package_root = Path(__file__).resolve().parent.parent
    if (package_root / ".git").exists():
        return package_root
    cwd = Path.cwd().resolve()
    return next((d for d in (cwd, *cwd.parents) if (d / ".git").exists()), None)


def portable_path(path: str | Path) -> str:
    """``path`` as records write it, so committed results read the same on any machine:
    ``$RMTL_DATA_DIR/...`` inside the data directory, relative to the repository root inside
    the source checkout (the nearer of the two when one holds the other), else absolute.
    :func:`recorded_path` reads it back. Remote URLs pass unchanged."""
    text = str(path)
    if "://" in text:
        return text
    p = Path(os.path.abspath(Path(text).expanduser()))
    candidates = []
    for root, prefix in ((data_dir(), DATA_DIR_MARK), (source_root(), None)):
        if root is None:
            continue
        for form in dict.fromkeys((p, p.resolve())):  # either spelling: a symlinked checkout still counts
            if form.is_relative_to(root):
                rel = form.relative_to(root).as_posix()
                if prefix is not None:
                    rel = prefix if rel == "." else f"{prefix}/{rel}"
                candidates.append((len(root.parts), rel))
                break
    if not candidates:
        return str(p)
    return max(candidates, key=lambda c: c[0])[1]


def expand_data_dir(value: str | Path, override: str | Path | None = None) -> Path:
    """``value`` with a leading ``$RMTL_DATA_DIR`` (the data directory, see :func:`data_dir`
    for ``override``) or ``~`` expanded; other paths as given."""
    text = str(value)
    if text == DATA_DIR_MARK or text.startswith(DATA_DIR_MARK + "/"):
        return data_dir(override) / text[len(DATA_DIR_MARK) + 1:]
    return Path(text).expanduser()


def recorded_path(value: str | Path) -> Path:
    """The path a record holds: ``$RMTL_DATA_DIR/...`` under this machine's data directory,
    a relative path under the repository root, an absolute one (older records) as it is.
    Callers handle remote URLs before this (a Path would fold their ``//``)."""
    p = expand_data_dir(value)
    if p.is_absolute():
        return p
    root = source_root()
    return root / p if root is not None else p.resolve()


def portable_command(argv: list[str]) -> list[str]:
    """``argv`` with each absolute path (also ``--opt=/path``) written by :func:`portable_path`."""
    out = []
    for arg in argv:
        flag, eq, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
        out.append(flag + eq + portable_path(value) if value.startswith(("/", "~")) else arg)
    return out


def portable_values(value: Any) -> Any:
    """``value`` (a JSON-able structure) with every string that is an absolute path made portable."""
    if isinstance(value, dict):
        return {k: portable_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable_values(v) for v in value]
    if isinstance(value, str) and value.startswith("/") and "\n" not in value:
        return portable_path(value)
    return value


def json_safe(value: Any) -> Any:
    """``value`` (a JSON-able structure) with every float JSON cannot hold (NaN, infinity) as None
    (null), so any JSON reader takes the file: the one place NaN becomes null."""
    import math

    import numpy as np

    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def git_state(cwd: str | Path | None = None) -> tuple[str | None, bool | None]:
    """(HEAD commit, whether tracked files are modified) of the source checkout; (None, None)
    outside a git checkout. The one place this package asks git."""
    src = Path(cwd) if cwd else Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=src, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    return sha, (bool(status.stdout.strip()) if status.returncode == 0 else None)


def git_commit(cwd: str | Path | None = None) -> str:
    """Commit of the source checkout (with '-dirty' if modified), or 'unknown' outside git."""
    sha, dirty = git_state(cwd)
    return "unknown" if sha is None else sha + ("-dirty" if dirty else "")


def code_record() -> dict[str, Any]:
    """What a dataset store records of the code that wrote it (DatasetStore.create's ``code``)."""
    from rmtl import __version__

    sha, dirty = git_state()
    return {"code_version": __version__, "git_commit": sha, "git_dirty": dirty}


def versions() -> dict[str, str]:
    """Installed versions of the packages that decide results."""
    out = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else platform's processor string: speeds differ by CPU."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def run_record(config: Any = None, seed: int | None = None, **extra: Any) -> dict[str, Any]:
    """A JSON-able record of a run: command line, time, host, CPU, seed, versions, commit, config.
    Paths in the command line and config are written by :func:`portable_path`."""
    if hasattr(config, "model_dump"):
        config = config.model_dump(mode="json")
    return {
        "command": " ".join(portable_command(sys.argv)),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "cpu": cpu_model(),
        "seed": seed,
        "git_commit": git_commit(),
        "versions": versions(),
        "config": portable_values(config),
        **portable_values(extra),
    }


def write_run_record(directory: str | Path, config: Any = None, seed: int | None = None,
                     name: str = "run.json", **extra: Any) -> Path:
    """Write :func:`run_record` as ``<directory>/<name>`` and return its path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_text(json.dumps(run_record(config, seed, **extra), indent=2, default=str))
    return path
