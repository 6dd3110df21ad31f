"""Model spec grammar and model ids (rmtl.vlm.spec)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmtl.errors import ModelLoadError
from rmtl.vlm.spec import parse_spec, safe_id


@pytest.mark.parametrize(
    "text, kind, model_id",
    [
        ("PE-Core-bigG-14-448:meta", "tag", "PE-Core-bigG-14-448__meta"),
        ("ViT-B-32:laion2b_s34b_b79k", "tag", "ViT-B-32__laion2b_s34b_b79k"),
        ("rmtl-fetch-tiny", "name", "rmtl-fetch-tiny"),
        ("ViT-S-32@random", "random", "ViT-S-32__random"),
        ("hf-hub:timm/PE-Core-bigG-14-448", "hf-hub", "hf-hub__timm__PE-Core-bigG-14-448"),
        ("local-dir:/models/my clip", "local-dir", "my-clip__local"),
        ("/models/fetch_clip", "local-dir", "fetch_clip__local"),
        ("ViT-B-32:/ckpt/epoch_3.safetensors", "local-file", "ViT-B-32__epoch_3"),
    ],
)
def test_spec_kinds_and_ids(text, kind, model_id):
    spec = parse_spec(text)
    assert spec.kind == kind
    assert spec.model_id == model_id
    assert safe_id(spec.model_id) == spec.model_id


def test_spec_fields():
    s = parse_spec("PE-Core-bigG-14-448:meta")
    assert (s.arch, s.tag) == ("PE-Core-bigG-14-448", "meta")
    f = parse_spec("ViT-B-32:~/w.pt")
    assert f.path == Path("~/w.pt").expanduser()


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        ("hf-hub:justone", "hf-hub:ORG/REPO"),
        ("/tmp/x@random", "architecture name only"),
        ("weights.safetensors", "without an architecture"),
        ("ViT-B-32:", "after ':'"),
    ],
)
def test_bad_specs_one_line(text, words):
    with pytest.raises(ModelLoadError) as e:
        parse_spec(text)
    assert words in str(e.value) and "\n" not in str(e.value)
