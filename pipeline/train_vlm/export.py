"""What a training run leaves behind: the weights in OpenCLIP's format, metrics.json and
train_log.csv, the renderer its frames came from (renderer.json) and the model card."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from collections.abc import Sequence

from pipeline.train_vlm.config import TrainVLMConfig
from rmtl.reward.projection import DEFAULT_ALPHA


def save_run(vlm, arch: str, out_dir: str | Path, metrics: dict, log: list[dict]) -> None:
    """The trained weights (:func:`save_model`), metrics.json and train_log.csv."""
    out = Path(out_dir)
    save_model(vlm, arch, out)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    with open(out / "train_log.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "loss", "lr", "images_per_s", "held_out_caption_loss"])
        w.writeheader()
        w.writerows(log)


def save_model(vlm, arch: str, out_dir: str | Path) -> Path:
    """Save weights (float16 safetensors) and OpenCLIP's config JSON: a loadable directory
    (without a packaged text tower's weights, which always load from their package)."""
    from safetensors.torch import save_file

    from rmtl.vlm.loader import FROZEN_TEXT_PREFIX
    from rmtl.vlm.registry import architecture_config, packaged_text_tower

    out = Path(out_dir)
    # A frozen packaged text tower loads from its package: the checkpoint holds the rest only.
    frozen = FROZEN_TEXT_PREFIX if packaged_text_tower(architecture_config(arch)) else None
    state = {k: v.detach().to("cpu").half().contiguous() for k, v in vlm.model.state_dict().items()
             if frozen is None or not k.startswith(frozen)}
    save_file(state, str(out / "open_clip_model.safetensors"))
    cfg = {"model_cfg": architecture_config(arch), "preprocess_cfg": dict(vlm.preprocess_cfg)}
    (out / "open_clip_config.json").write_text(json.dumps(cfg, indent=2))
    return out


def invoking_command(argv: list[str] | None = None) -> str:
    """The command line that ran this process, as a user would type it (``python -m
    pipeline.train_vlm ...`` when this module is the entry point, else the calling script)."""
    import shlex

    from rmtl.provenance import portable_command

    argv = portable_command(list(sys.argv if argv is None else argv))
    entry = Path(argv[0])
    # python -m pipeline.train_vlm runs the package's __main__.py (formerly the module train_vlm.py)
    if entry.stem == "train_vlm" or (entry.parent.name == "train_vlm" and entry.stem in ("__main__", "cli")):
        return "python -m pipeline.train_vlm " + shlex.join(argv[1:])
    script = entry
    try:
        script = script.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    return "python " + shlex.join([str(script), *argv[1:]])


def store_renderers(stores: Sequence[str | Path]) -> set[str]:
    """The render settings (sorted JSON) the stores' frames were rendered with, one entry per distinct setting."""
    from storage.dataset import DatasetStore

    renderers = set()
    for path in stores:
        with DatasetStore.open(path, "r") as st:
            r = st.info.get("renderer") or {}
            renderers.add(json.dumps({"cull_invisible": bool(r.get("culled_geoms")),
                                      "mesh_reduction": r.get("mesh_reduction", 0.0),
                                      "msaa_samples": r.get("msaa_samples", 4)}, sort_keys=True))
    return renderers


def write_renderer(out_dir: str | Path, renderers: set[str]) -> dict | None:
    """renderer.json when every training frame came from one render setting: the model declares
    the renderer of its training frames (rmtl.vlm.registry.declared_renderer); that setting, or None."""
    if len(renderers) != 1:
        return None
    declared = next(iter(renderers))
    (Path(out_dir) / "renderer.json").write_text(declared + "\n")
    return json.loads(declared)


def write_model_card(out_dir: str | Path, cfg: TrainVLMConfig, data_desc: str, metrics: dict, command: str,
                     renderer: dict | None = None) -> Path:
    """model_card.md: what the model is, its renderer, data, captions, config, metrics and the command."""
    m, r = metrics["final"]["mean"], metrics.get("random_init", {}).get("mean", {})
    row = lambda k: f"| {k} | {m.get(k, float('nan')):.3f} | {r.get(k, float('nan')):.3f} |"  # noqa: E731
    keys = ["approach_spearman", "approach_spread", "align_spearman", "align_spread", "grasp_auc",
            "grasp_spread", "right_prompt_accuracy", "step_variation"]
    init = metrics.get("init_model_id", cfg.init)
    from rmtl.vlm.registry import architecture_config, packaged_text_tower

    frozen = packaged_text_tower(architecture_config(cfg.model) or {})
    if cfg.init is None and frozen:
        text = (architecture_config(cfg.model).get("text_cfg") or {}).get("hf_model_name")
        origin = (f"whose image tower was trained from random weights to a frozen pretrained text tower "
                  f"(`{text}`, from the installed package `{frozen}`; LiT, text side locked)")
    elif cfg.init is None:
        origin = "trained from random weights"
    elif cfg.reset_text_tower:
        image = "locked" if cfg.tune == "text" else "fine-tuned"
        origin = f"with the image tower of `{init}` ({image}) and a text tower trained from random weights"
    else:
        towers = "text tower only, image tower locked" if cfg.tune == "text" else "both towers"
        origin = f"fine-tuned from `{init}` ({towers})"
    caption_line = {
        "neutral": "prompt-neutral: descriptive captions from state that contain none of the evaluated prompt "
                   "texts (baseline, approach, align, grasp, single prompt); no prompt-based loss or model selection",
        "compositional": "prompt-neutral, compositional (rmtl/tasks/fetch_lift/neutral_captions.py): one to three facts "
                         "of the state in many wordings, none containing any phrasing of any shipped prompt set; no "
                         "prompt-based loss or model selection; the evaluated prompts are scored zero-shot",
        "compositional_lift": "prompt-neutral, compositional with the lift focus (rmtl/tasks/fetch_lift/neutral_captions.py): "
                              "as compositional, and at the gripper every caption says whether the cube is off the table; "
                              "no caption nearly paraphrases an evaluated prompt; no prompt-based loss or model selection",
        "compositional_graded_lift": "prompt-neutral, compositional with the graded lift (rmtl/tasks/fetch_lift/"
                                     "neutral_captions.py): as compositional_lift, the cube's height at the gripper "
                                     "graded by degree (resting, just raised, a few centimetres, high) in many "
                                     "wordings; no caption nearly paraphrases an evaluated prompt; no prompt-based "
                                     "loss or model selection",
        "graded": "graded: the paper prompts are among the captions (progress-graded, target situations, baseline)",
    }[cfg.captions]
    audit = metrics.get("caption_leak_audit")
    audit_line = ("not run (graded captions contain the prompts by design)" if not audit else
                  f"{audit['exact_leaks']} exact leaks and {audit['near_paraphrases']} near paraphrases (word overlap >= "
                  f"{audit['threshold']}) of {audit['evaluated_texts']} evaluated prompt texts in {audit['distinct']} distinct "
                  f"captions of {audit['captions']} training states; closest: {audit['closest']['similarity']} "
                  f"({audit['closest']['caption']!r} ~ {audit['closest']['prompt']!r})")
    renderer_line = (f"{json.dumps(renderer, sort_keys=True)} (its training frames; declared in renderer.json)"
                     if renderer else "not one setting (frames rendered here or by several renderers)")
    cosine = lambda d: "/".join(f"{c:.3f}" for c in d.get("goal_baseline_cosine", {}).values()) or "n/a"  # noqa: E731
    text = "\n".join([
        f"# {cfg.model}: a domain-trained stand-in reward VLM for Fetch pick-and-lift",
        "",
        f"A small OpenCLIP model {origin} on this project's own MuJoCo renders",
        "(six-camera bank, paper visual domain) with captions written from simulator state",
        "(`rmtl/tasks/fetch_lift/captions.py`). It is **not** PE-Core-bigG-14-448 and knows nothing outside",
        "this scene; it exists so the reward means something on machines without pretrained weights.",
        "",
        f"- renderer: {renderer_line}",
        f"- data: {data_desc}",
        f"- captions: {caption_line}",
        f"- leak check: {audit_line}",
        f"- training: {json.dumps(cfg.model_dump(mode='json'))}",
        f"- steps done: {metrics.get('steps_done')} (weights of step {metrics.get('selected_step')}"
        + (f", selected by {metrics['select_by']}" if "select_by" in metrics else "") + "), "
        f"seconds: {metrics.get('train_seconds', 0):.0f}",
        f"- reproduce: `{command}`",
        "",
        f"Held-out expert episodes, multi-view mean, alpha {DEFAULT_ALPHA} (random-weight model of the same architecture beside it):",
        "",
        "| metric | trained | random weights |",
        "| --- | --- | --- |",
        *[row(k) for k in keys],
        f"| goal-baseline cosine approach/align/grasp | {cosine(metrics['final'])} "
        f"| {cosine(metrics.get('random_init', {}))} |",
        "",
    ])
    path = Path(out_dir) / "model_card.md"
    path.write_text(text)
    return path
