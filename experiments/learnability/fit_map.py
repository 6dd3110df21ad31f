"""Fits the learnability map (results/learnability/RULE.md): ``rmtl qualify fit-map`` with this
experiment's folders (pipeline/qualify/fit.py does the work).

    python experiments/learnability/fit_map.py [--ship] [any other 'rmtl qualify fit-map' option]

The conditions and checks are the sweep files beside this script (``rmtl sweep`` runs them); the
rule-only reference runs are results/oracle_structure's; the map, runs.csv, runs.md, conditions.md
and the PNGs go to results/learnability (``--ship``: the map also into the task's package).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    from rmtl.cli import run

    args = list(sys.argv[1:] if argv is None else argv)
    out = [] if any(a == "--out" or a.startswith("--out=") for a in args) else ["--out", str(REPO / "results/learnability")]
    return run(["qualify", "fit-map", "--conditions", str(REPO / "experiments/learnability/conditions.yaml"),
                "--checks", str(REPO / "experiments/learnability/checks.yaml"), *out, *args])


if __name__ == "__main__":
    raise SystemExit(main())
