"""Round 4 of the prompt-neutral stand-in: render, train, gate, time (a GPU machine, or the CPUs).

One prepared script for a short GPU lease (ROUND4.md says what it decides). Stages, each
logged with its wall time, each writing what it has to ``--out`` before the next starts:

1. render every training and held-out family of ROUND4.md (families.yaml, round ``--families``)
   into its own store, one process
   per store on ``--workers`` cores (the same jobs `rmtl render-and-embed` runs, without Prefect);
2. train `rmtl-fetch-fast`'s architecture from random weights on the training stores
   (compositional captions, no prompt-based loss or selection) for ``--train-budget-s``;
3. embed the held-out stores with the trained model and compute the registered gates (gates.py);
4. time Stage-1 RMTL with the pixel reward on this machine (bench/train_fast_path.py).

    python experiments/reward_vlm/rmtl-fetch-fast/round4_gpu.py --out OUT --stores DIR --pixel DIR

``--smoke`` shrinks every family to at most two episodes (the four expert stores to 24 each,
so that training has held-out expert episodes) and training to a few steps, to check the
script end to end on a CPU before the lease.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from collections.abc import Callable

from rmtl.provenance import portable_values

from families import POLICIES, load_families, round_families, round_spec  # this script's folder

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RESULTS = ROOT / "results" / "reward_vlm" / "rmtl-fetch-fast"
"""Where gates.py writes a round's gates."""


def render_job(path: str, params: dict, render: dict, model: str) -> dict:
    """Render one family into its store (frames at ``model``'s 64 px, on ``render``)."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    import torch

    torch.set_num_threads(1)
    from pipeline.jobs.render import render_to_store
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig, rollout_config

    t = time.perf_counter()
    cfg = RenderAndEmbedConfig(store=path, model=model, render=render, **params)
    res = render_to_store(path, rollout_config(cfg, 64), workers=1, progress=False)
    return {"store": path, "rows": res.rows, "episodes": res.episodes_rendered, "seconds": time.perf_counter() - t}


def stage_render(a, status: dict) -> None:
    data = load_families()
    todo = round_families(a.families, policies=a.policies, learner=a.pixel, smoke=a.smoke, data=data)
    render = a.render if a.render is not None else round_spec(data, a.families)["render"]
    a.stores.mkdir(parents=True, exist_ok=True)
    done = []
    with ProcessPoolExecutor(a.workers) as pool:
        futs = {pool.submit(render_job, str(a.stores / f"{name}.zarr"), p, render, data["model"]): name for name, p in todo}
        for f in as_completed(futs):
            r = f.result()
            done.append(r)
            log(f"rendered {futs[f]}: {r['episodes']} episodes, {r['rows']} rows, {r['seconds']:.0f} s")
    status["render"] = {"families": sorted(done, key=lambda r: r["store"]),
                        "rows": sum(r["rows"] for r in done), "episodes": sum(r["episodes"] for r in done)}


def stage_train(a, status: dict) -> None:
    from pipeline.train_vlm import TrainVLMConfig, train_from_options
    from pipeline.train_vlm.cli import TrainVLMOptions

    cfg = TrainVLMConfig.make(model="rmtl-fetch-fast", captions="compositional", baseline_balance=0,
                              select_by="last", steps=a.train_steps, time_budget_s=a.train_budget_s,
                              batch_size=a.batch_size, lr=1e-3, warmup_steps=300, eval_every=a.eval_every,
                              checkpoint_every=10**6, soft_sigma=0.03, seed=0, device=a.device,
                              frame_cache_gb=a.frame_cache_gb)
    stores = sorted(str(p) for p in a.stores.glob("train_*.zarr"))
    train_from_options(cfg, TrainVLMOptions.make(store=tuple(stores), out=str(a.model_dir)))
    status["train"] = {"stores": len(stores), "config": cfg.model_dump(mode="json")}


def stage_gate(a, status: dict) -> None:
    from pipeline.jobs.embed import embed_store
    from rmtl.vlm import load_vlm

    vlm = load_vlm(str(a.model_dir), device=a.device)
    held = sorted(str(p) for p in a.stores.glob("heldout_*.zarr"))
    for s in held:
        embed_store(s, vlm, batch_size=512, progress=False)
    subprocess.run([sys.executable, str(HERE / "gates.py"), "--model", str(a.model_dir), "--round", str(a.round),
                    "--store", *held], check=True, cwd=ROOT)
    status["gate"] = json.loads((RESULTS / f"gates_round{a.round}.json").read_text())["gates"]


def stage_bench(a, status: dict) -> None:
    out = a.out / "train_fast_path_gpu.json"
    cmd = [sys.executable, str(ROOT / "bench/train_fast_path.py"), "--paths", "fast", "new", "--repeats", "1",
           "--model", "rmtl-fetch-tiny@random", "--new-model", str(a.model_dir), "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, timeout=a.bench_timeout_s)
    status["bench"] = json.loads(out.read_text()).get("env_steps_per_s_median")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


STAGES = {"render": stage_render, "train": stage_train, "gate": stage_gate, "bench": stage_bench}


def run_stages(a, stages: dict[str, Callable], needed: tuple[str, ...] = ("render", "train")) -> bool:
    """Run ``a.stages`` in order, each logged with its wall time and recorded (with its errors) in
    ``a.out``/status.json as soon as it ends; a failed stage in ``needed`` (the later stages read
    its output) ends the run. A status.json already there keeps the records of the stages not run
    again (a round run stage by stage). Returns whether every stage run succeeded."""
    path = a.out / "status.json"
    status: dict = json.loads(path.read_text()) if path.is_file() else {"seconds": {}}
    status.update(argv=sys.argv, started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    ok = True
    for name in a.stages:
        t = time.perf_counter()
        log(f"stage {name}")
        status.get("errors", {}).pop(name, None)
        try:
            stages[name](a, status)
        except Exception:  # noqa: BLE001  (each stage reports and the next still runs)
            ok = False
            status.setdefault("errors", {})[name] = traceback.format_exc()[-4000:]
            log(f"stage {name} failed:\n{status['errors'][name]}")
        status["seconds"][name] = round(time.perf_counter() - t, 1)
        path.write_text(json.dumps(portable_values(status), indent=1, default=str))
        log(f"stage {name}: {status['seconds'][name]} s")
        if name in needed and not ok:
            break
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--policies", type=Path, default=POLICIES,
                    help="holds runs/<run>/best/model.zip and stage2_worker/model.zip")
    ap.add_argument("--pixel", type=Path, default=None,
                    help="policy-only checkpoints <step>/model.zip of the round's own pixel-reward learner")
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--round", type=int, default=4, help="names the gate outputs (gates_round<R>.*)")
    ap.add_argument("--families", type=int, default=4, help="the round of families.yaml to render")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--device", default=None)
    ap.add_argument("--train-steps", type=int, default=30000)
    ap.add_argument("--train-budget-s", type=float, default=210.0)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--frame-cache-gb", type=float, default=24.0)
    ap.add_argument("--bench-timeout-s", type=float, default=150.0)
    ap.add_argument("--render", type=json.loads, default=None,
                    help="render settings of every store (JSON; default: the families' round's, families.yaml)")
    ap.add_argument("--stages", nargs="+", choices=list(STAGES), default=list(STAGES))
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    a.model_dir = a.model_dir or a.out / "model"
    ok = run_stages(a, STAGES)
    for f in RESULTS.glob(f"*round{a.round}.*"):
        shutil.copy2(f, a.out / f.name)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
