"""What ``rmtl qualify fit-map`` writes: the map, its tables and plots, and the record of what it wrote
(``.rmtl-output.json``), which is all it may replace in its ``--out`` folder."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence


from pipeline.qualify.learnability_map import LearnabilityMap, plot_map
from rmtl.errors import ConfigError
from storage.whole_file import write_file_whole

MAP_FILE = "learnability_map.json"
"""The map's name in ``--out`` (the default ``--map-out``)."""
TABLES = ("runs.csv", "runs.md", "conditions.md", "map_metrics.png", "map_2d.png")
"""What fit-map writes into ``--out`` besides the map."""
KIND = "learnability-map"
WRITTEN_BY = "rmtl qualify fit-map"
TEACHES_AT = 0.5
"""Test success from which a run teaches (results/learnability/RULE.md)."""


# -- what an output may replace ----------------------------------------------------------
def _record(out: Path) -> dict:
    from rmtl.outputs import MARKER

    try:
        data = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("kind") == KIND else {}


def _is_map_file(path: Path) -> bool:
    """Whether ``path`` holds a learnability map (what this command writes), of any version."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and {"axes", "conditions", "fitted"} <= set(data)


def check_outputs(out: Path, map_out: Path, shipped: Path | None, ship: bool) -> None:
    """Before any work: ``--out`` may hold only files this command wrote there (its record), the map
    file may replace only a learnability map, and the task's shipped map only with ``--ship``."""
    from rmtl.outputs import MARKER, check_writable_into

    check_writable_into(out, own=(), writes="the learnability map's tables and plots")
    if (out / MARKER).exists() and not _record(out):
        raise ConfigError(f"--out {out} holds {MARKER} of another output; fit-map writes only into a folder of its "
                          "own: choose another --out")
    ours = set(_record(out).get("files", ()))
    inside = [n for n in TABLES if (out / n).exists() and n not in ours]
    if inside:
        raise ConfigError(f"--out {out} already holds {', '.join(inside)}, not written there by '{WRITTEN_BY}' (its "
                          f"record, {MARKER}, does not list them); fit-map never replaces them: choose another --out "
                          "or move them away")
    if shipped is not None and map_out.resolve() == shipped.resolve() and not ship:
        raise ConfigError(f"--map-out {map_out} is the task's shipped map; pass --ship to replace it")
    if map_out.is_dir():
        raise ConfigError(f"--map-out {map_out} is a directory; give the path of the map's JSON file")
    owned = map_out.parent.resolve() == out.resolve() and map_out.name in ours
    if map_out.exists() and not owned and not _is_map_file(map_out):
        raise ConfigError(f"--map-out {map_out} exists and is not a learnability map; fit-map never replaces it: "
                          "give another --map-out")


def _write_record(out: Path, names: Sequence[str]) -> None:
    from rmtl.outputs import MARKER

    files = sorted(set(_record(out).get("files", ())) | set(names))
    write_file_whole(out / MARKER, json.dumps({"kind": KIND, "written_by": WRITTEN_BY, "files": files}, indent=1) + "\n")


# -- the tables and plots ----------------------------------------------------------------
def condition_table(conditions: Sequence[Mapping[str, Any]], seeds: Sequence[int], by_seed: Mapping[tuple[str, int], float],
                    axes: Sequence[str], teaches_at: float) -> str:
    """conditions.md: a condition per row, its mean metrics, each seed's test success and how many taught."""
    head = ["condition", *axes, *[f"seed {s}" for s in seeds], "taught"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for c in conditions:
        outs = [by_seed.get((c["name"], s)) for s in seeds]
        done = [o for o in outs if o is not None]
        lines.append(f"| {c['name']} | " + " | ".join(f"{c['metrics'][k]:.2f}" for k in axes) + " | "
                     + " | ".join("-" if o is None else f"{o:.3f}" for o in outs)
                     + f" | {sum(o >= teaches_at for o in done)} of {len(done)} |")
    return "\n".join(lines) + "\n"


def run_table(rows: Sequence[Mapping[str, Any]], axes: Sequence[str], first: str) -> list[str]:
    lines = [f"| {first} | seed | " + " | ".join(axes) + " | test success (best) | final |", "|---" * (len(axes) + 4) + "|"]
    return lines + [f"| {r['condition']} | {r['seed']} | " + " | ".join(f"{r[k]:.2f}" for k in axes)
                    + f" | {r['test_success']:.3f} | {r['final_test']:.3f} |" for r in rows]


def plot_metrics(rows: Sequence[Mapping[str, Any]], path: Path, axes: Sequence[str], teaches_at: float, steps: int) -> Path:
    """Test success against each axis, one point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(-(-len(axes) // 3), 3, figsize=(12, 3.5 * -(-len(axes) // 3)), squeeze=False)
    for ax, metric in zip(axs.ravel(), axes):
        for r in rows:
            ax.scatter(r[metric], r["test_success"], c="tab:green" if r["test_success"] >= teaches_at else "tab:red", s=25)
            ax.annotate(r["condition"], (r[metric], r["test_success"]), fontsize=5, alpha=0.6)
        ax.axhline(teaches_at, color="grey", lw=0.8, ls="--")
        ax.set_xlabel(metric)
        ax.set_ylabel("test success (best on validation)")
    fig.suptitle(f"learnability map: test success at {steps // 1000}k against each scorer metric (one point per run)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    plt.close(fig)
    write_file_whole(path, buf.getvalue())
    return path


def write_outputs(fitted: LearnabilityMap, out: Path, map_out: Path, task: Any, ship: bool, rows: list[dict],
                   check_rows: list[dict], checked: list[dict], mapped: list[dict], seeds: Sequence[int],
                   axes: Sequence[str], steps: int) -> list[Path]:
    """The map (and the shipped one with ``ship``), runs.csv, runs.md, conditions.md and the PNGs, and
    the record of what fit-map wrote into ``out``; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    text = fitted.to_json()
    write_file_whole(map_out, text)
    written = [map_out]
    if ship and task.learnability_map is not None and task.learnability_map.resolve() != map_out.resolve():
        write_file_whole(task.learnability_map, text)
        written.append(task.learnability_map)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=["condition", "seed", *axes, "test_success", "final_test", "best_step"])
    w.writeheader()
    w.writerows(rows)
    write_file_whole(out / "runs.csv", buf.getvalue())
    lines = run_table(rows, axes, "condition")
    if checked:
        lines += ["", "Checks of the map (kept out of the fit; verdict: the map's at the check's metrics):", ""]
        lines += run_table(check_rows, axes, "check")
        lines += [""] + [f"- {c['name']}: verdict {c['verdict']['verdict']}, outcomes {c['outcomes'] or 'none yet'}"
                         for c in checked]
    write_file_whole(out / "runs.md", "\n".join(lines) + "\n")
    by_seed = {(r["condition"], r["seed"]): r["test_success"] for r in rows + check_rows}
    write_file_whole(out / "conditions.md", condition_table(mapped, seeds, by_seed, axes, TEACHES_AT)
                     + "\nChecks (replayed stand-ins, kept out of the fit):\n\n"
                     + condition_table(checked, seeds, by_seed, axes, TEACHES_AT))
    plot_metrics(rows, out / "map_metrics.png", axes, TEACHES_AT, steps)
    plot_map(fitted, {}, out / "map_2d.png", task.map_plane)
    written += [out / n for n in TABLES]
    _write_record(out, [p.name for p in written if p.parent.resolve() == out.resolve()])
    return written
