"""Load an `rmtl export lerobot` dataset with LeRobot's own loader, offline, from a local root.

Run in a separate virtualenv with LeRobot installed (its releases pin an older torch than this
project), e.g.:

    python3 -m venv .dev/lrvenv && .dev/lrvenv/bin/pip install 'lerobot==0.4.4'
    rmtl export lerobot data/stores/STORE.zarr --prompts paper --out .dev/lr_export
    HF_HUB_OFFLINE=1 .dev/lrvenv/bin/python experiments/lerobot_check/load_with_lerobot.py .dev/lr_export

Prints what LeRobot read (episodes, frames, features, one decoded frame per camera, the VLM
reward column) and exits non-zero if anything disagrees with the export's meta/info.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(root: str) -> int:
    import lerobot
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    info = json.loads((Path(root) / "meta" / "info.json").read_text())
    # PyAV decodes the videos (it bundles FFmpeg; torchcodec, the default, needs system FFmpeg libraries)
    ds = LeRobotDataset(repo_id="rmtl/local-export", root=root, video_backend="pyav")
    print(f"lerobot {lerobot.__version__}, torch {torch.__version__}")
    print(f"episodes {ds.num_episodes}, frames {ds.num_frames}, fps {ds.fps}")
    assert ds.num_episodes == info["total_episodes"] and ds.num_frames == info["total_frames"]
    cams = ds.meta.camera_keys
    print(f"cameras {cams}")
    for i in (0, ds.num_frames - 1):
        item = ds[i]
        shapes = {k: tuple(item[k].shape) for k in cams}
        print(f"frame {i}: episode {int(item['episode_index'])}, index {int(item['frame_index'])}, "
              f"state {tuple(item['observation.state'].shape)}, action {tuple(item['action'].shape)}, "
              f"reward {float(item['next.reward']):.3f}, reward_vlm {float(item['next.reward_vlm']):.4f}, images {shapes}")
        for k in cams:
            img = item[k]
            assert img.dtype == torch.float32 and img.shape[0] == 3 and 0.0 <= float(img.min()) and float(img.max()) <= 1.0
    print("provenance:", json.dumps(info.get("rmtl", {}).get("reward_vlm", {}))[:300])
    print("OK: LeRobotDataset loaded every episode, frame and camera of the export")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
