"""A reward model's declared renderer: configs that use it render its frames unless told otherwise."""

import json

from rmtl.env.render_settings import RenderSettings
from rmtl.vlm.registry import declared_renderer


def test_the_fast_stand_in_declares_its_renderer_and_the_shipped_model_none():
    assert declared_renderer("rmtl-fetch-fast") == {"msaa_samples": 0}
    assert declared_renderer("rmtl-fetch-fast@random") == {"msaa_samples": 0}
    assert declared_renderer("rmtl-fetch-fast-r5") == {"msaa_samples": 0, "mesh_reduction": 0.9}
    assert declared_renderer("rmtl-fetch-fast-r6") == {"msaa_samples": 0, "mesh_reduction": 0.9}
    assert declared_renderer("rmtl-fetch-fast-r6-labelled") == {"msaa_samples": 0, "mesh_reduction": 0.9}
    assert declared_renderer("rmtl-fetch-fast-r7") == {"msaa_samples": 0, "mesh_reduction": 0.9}
    assert declared_renderer("rmtl-fetch-tiny") is None
    assert declared_renderer("ViT-B-32:openai") is None


def test_a_trained_model_directory_declares_its_renderer_in_renderer_json(tmp_path):
    assert declared_renderer(str(tmp_path)) is None
    (tmp_path / "renderer.json").write_text(json.dumps({"msaa_samples": 0, "mesh_reduction": 0.5}))
    assert declared_renderer(str(tmp_path)) == {"msaa_samples": 0, "mesh_reduction": 0.5}


def test_stage1_and_render_jobs_render_with_the_models_renderer_unless_told_otherwise():
    from pipeline.jobs.render_and_embed import RenderAndEmbedConfig
    from rmtl.train.config import stage1_config

    assert stage1_config("rmtl", reward={"model": "rmtl-fetch-fast@random"}).env.render.msaa_samples == 0
    assert stage1_config("rmtl").env.render == RenderSettings()
    told = stage1_config("rmtl", reward={"model": "rmtl-fetch-fast"}, env={"render": {"msaa_samples": 2}})
    assert told.env.render.msaa_samples == 2
    # a rerun from a recorded config keeps what it recorded
    again = type(told).model_validate(told.model_dump())
    assert again.env.render == told.env.render
    assert RenderAndEmbedConfig.make(model="rmtl-fetch-fast@random").render.msaa_samples == 0
    assert RenderAndEmbedConfig.make().render == RenderSettings()
