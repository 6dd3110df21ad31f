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


def test_shipped_and_local_weights_are_part_of_the_model_id(tmp_path):
    """Embeddings are stored under the model id: new weights under the same name or path
    must get a new id, or a store would serve embeddings of the old weights."""
    shipped = parse_spec("rmtl-fetch-tiny").model_id
    assert shipped.startswith("rmtl-fetch-tiny__") and len(shipped) == len("rmtl-fetch-tiny__") + 8
    d = tmp_path / "fetch_clip"
    d.mkdir()
    assert parse_spec(str(d)).model_id == "fetch_clip__local"  # no weights yet
    (d / "open_clip_model.safetensors").write_bytes(b"weights v1")
    first = parse_spec(str(d)).model_id
    (d / "open_clip_model.safetensors").write_bytes(b"weights v2")
    second = parse_spec(str(d)).model_id
    assert first.startswith("fetch_clip__local__") and second.startswith("fetch_clip__local__") and first != second
    by_file = parse_spec(f"ViT-B-32:{d / 'open_clip_model.safetensors'}").model_id
    assert by_file == "ViT-B-32__open_clip_model__" + second.rsplit("__", 1)[1]


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
