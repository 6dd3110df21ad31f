"""``rmtl qualify --compare``: several reward configurations of one model, ranked in one table.

Each configuration is qualified as ``rmtl qualify --variant V`` qualifies it (the model's
qualification stores are rendered once and embedded once; each configuration only re-scores
them), then ranked best first (:func:`pipeline.qualify.configurations.comparison_rank`), so a user
picks the configuration before training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from pipeline.qualify.configurations import comparison_rank
from pipeline.qualify.families import file_slug
from storage.whole_file import write_file_whole

ROW_AXES = ("approach_rank", "align_rank", "grasp_auc", "resting_grasp_pay", "noise_ratio")
"""The map's axes shown per configuration (right_prompt has no meaning for one prompt)."""
EARLY = ("grasp_early_snr", "approach_early_snr", "align_early_snr", "grasp_early_u", "approach_early_u",
         "align_early_u")


def compare(model: str, variants: Sequence[str], out_dir: Path, **qualify_args: Any) -> dict:
    """Qualify ``model`` as each of ``variants``; the ranked rows, also written as
    ``compare_<model>.json`` and ``.md`` in ``out_dir``."""
    from pipeline.qualify.report import qualify

    if len(set(variants)) != len(variants) or len(variants) < 2:
        from rmtl.errors import ConfigError

        raise ConfigError(f"--compare needs two or more different variants, got {list(variants)}")
    rows = []
    for variant in variants:
        report = qualify(model=model, reward=None, out_dir=out_dir, variant=variant, **qualify_args)
        rows.append(_row(report))
    ranked = comparison_rank(rows)
    out = {"model": model, "ranked": ranked}
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"compare_{file_slug(model)}"
    out["files"] = {"json": str(stem.with_suffix(".json")), "md": str(stem.with_suffix(".md"))}
    write_file_whole(out["files"]["json"], json.dumps(out, indent=1, default=float))
    write_file_whole(out["files"]["md"], format_compare(out) + "\n")
    return out


def _row(report: Mapping[str, Any]) -> dict:
    v = report["map"]
    p = v.get("p_teaches")
    return {"variant": report["configuration"]["variant"], "configuration": report["configuration"],
            "axes": {k: report["pooled"]["value"].get(k) for k in ROW_AXES},
            "early_progress": dict(report.get("early_progress", {})),
            "behaviours_at_or_above_expert": list(report["behaviours_at_or_above_expert"]),
            "trap_share": (report.get("trap") or {}).get("trap_share"),
            "trap_ratio": (report.get("trap") or {}).get("trap_ratio"),
            "verdict": v["verdict"], "held": v.get("held"), "p_teaches": p, "p_interval_90": v.get("p_interval_90"), "why": v.get("why"),
            "report": report["files"]["json"]}


def format_compare(out: Mapping[str, Any]) -> str:
    """The ranked configurations as a Markdown table, best first."""
    f = lambda x: "n/a" if x is None or x != x else f"{x:.2f}"  # noqa: E731
    head = ["rank", "configuration", *ROW_AXES, *EARLY, "battery: behaviours >= expert", "trap share (ratio)",
            "P(teaches) [90%]", "verdict"]
    lines = [f"# `rmtl qualify --compare` on `{out['model']}`", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, r in enumerate(out["ranked"], 1):
        c = r["configuration"]
        n = len(c["views"])
        name = f"{r['variant']} ({'one prompt' if c['single_prompt'] else 'micro-task prompts'}, {n} view{'s' * (n != 1)})"
        p = r["p_teaches"]
        pi = r["p_interval_90"] or [None, None]
        cells = [str(i), name, *(f(r["axes"][k]) for k in ROW_AXES), *(f(r["early_progress"].get(k)) for k in EARLY),
                 ", ".join(r["behaviours_at_or_above_expert"]) or "none",
                 "n/a" if r.get("trap_share") is None else f"{f(r['trap_share'])} ({f(r.get('trap_ratio'))})",
                 f"{f(p)} [{f(pi[0])}, {f(pi[1])}]" if p is not None else "n/a", r["verdict"]]
        lines.append("| " + " | ".join(cells) + " |")
    unmapped = sorted({r["why"] for r in out["ranked"] if r["verdict"] == "unmapped" and r["why"]})
    lines += ["", "Ranked by P(teaches) when every configuration has one; otherwise by the weakest early-progress gain "
              "in u (min over the phases; an order not yet validated by runs); a configuration held at \"does not "
              "teach\" by its trap share (n/a for micro-task prompts: the phase decides which score pays) ranks last."
              + (" Unmapped: " + "; ".join(unmapped) if unmapped else "")]
    return "\n".join(lines)


__all__ = ["compare", "format_compare"]
