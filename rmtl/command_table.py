"""Every ``rmtl`` command: its words, its config class, what it runs, its help line. The
classes and functions are import paths, imported only by the command that runs (listing
commands and a bad command line import no model code)."""

from __future__ import annotations

from rmtl.config_cli import Command

_TRAIN = "rmtl.train.cli"
_ANALYSIS = "pipeline.commands"
RUN_ALIASES = {"--steps": "--total-timesteps", "--out": "--output-dir", "--progress": "--progress-bar"}
"""Short options of both training commands for their most used fields."""

GROUPS = {
    "env": "The Fetch pick-and-lift environment.",
    "train": "Train the learners (Stage 1: PPO worker; Stage 2: manager).",
    "server": "A local Prefect server (PREFECT_HOME under the data dir).",
    "store": "Dataset stores: check their integrity.",
    "export": "Export a dataset store to other formats.",
}
"""Words that only group commands, and their help lines."""

COMMANDS: dict[str, Command] = {
    "env preview": Command("rmtl.commands:EnvPreviewConfig", "rmtl.commands:env_preview",
                           "A labelled PNG montage of the camera views of one seeded reset."),
    "env check": Command("rmtl.commands:EnvCheckConfig", "rmtl.commands:env_check",
                         "Success rates of the scripted expert and of random actions."),
    "store verify": Command("rmtl.commands:StoreVerifyConfig", "rmtl.commands:store_verify",
                            "Read every committed chunk of a store and name the damaged ones."),
    "render-and-embed": Command("pipeline.jobs.render_and_embed:RenderAndEmbedConfig", "rmtl.cli:render_and_embed",
                                "Render episodes into a Zarr store, embed them, build the FAISS cache, summarise "
                                "reward quality.", options="rmtl.cli:RenderAndEmbedOptions"),
    "train stage1": Command("rmtl.train.config:Stage1Config", f"{_TRAIN}:run_stage1",
                            "Train the Stage-1 PPO worker (paper Table 1).", options=f"{_TRAIN}:TrainOptions",
                            aliases={**RUN_ALIASES, "--model": "--reward.model", "--cache-store": "--cache.store",
                                     "--cache-radius": "--cache.radius", "--cache-grow": "--cache.grow"},
                            presets=("--variant",), build=f"{_TRAIN}:build_stage1"),
    "train stage2": Command("rmtl.train.config:Stage2Config", f"{_TRAIN}:run_stage2",
                            "Train the Stage-2 manager over a Stage-1 worker (paper Table 2).",
                            options=f"{_TRAIN}:TrainOptions", aliases={**RUN_ALIASES, "--bc-labels": "--bc.labels"}),
    "train select": Command(f"{_TRAIN}:SelectConfig", f"{_TRAIN}:select",
                            "Best checkpoint on validation seeds; it and the final one on test seeds."),
    "train stage2-report": Command(f"{_TRAIN}:Stage2ReportAliasConfig", f"{_TRAIN}:stage2_report_alias",
                                   "The earlier name of 'rmtl report --stage 2'."),
    "eval": Command(f"{_TRAIN}:EvalConfig", f"{_TRAIN}:evaluate",
                    "Success rate (95% Wilson CI) of a Stage-1 checkpoint on the fully random start."),
    "report": Command(f"{_TRAIN}:ReportConfig", f"{_TRAIN}:report",
                      "Stage 1: Fig. 5/6 and the success table; --stage 2: Fig. 7 of a Stage-2 run."),
    "train-reward-vlm": Command("pipeline.train_vlm.config:TrainVLMConfig", "pipeline.train_vlm.cli:train_from_options",
                                "Train the domain reward VLM.", options="pipeline.train_vlm.cli:TrainVLMOptions",
                                bool_values=True),  # its booleans have always taken a value: --reset-text-tower false
    "serve": Command("flows.serve:ServeConfig", "flows.serve:serve_from_config", "Serve the flows as deployments.",
                     aliases={"--flow": "--flows"}),
    "sweep": Command("flows.sweep:SweepConfig", "flows.sweep:sweep",
                     "Run a sweep file's training runs on Prefect work pools (or --local)."),
    "server start": Command("flows.server:ServerConfig", "flows.server:start",
                            "Start a background Prefect server and print the settings clients need."),
    "server stop": Command("flows.server:ServerLookupConfig", "flows.server:stop", "Stop the background Prefect server."),
    "server status": Command("flows.server:ServerLookupConfig", "flows.server:status",
                             "Show the Prefect server, if any (status 1 when none runs)."),
    "embed": Command("pipeline.jobs.embed:EmbedConfig", f"{_ANALYSIS}:embed",
                     "Embed a store's rows not yet embedded by a model, and the prompts' text."),
    "embed-text": Command("pipeline.jobs.embed_text:EmbedTextConfig", f"{_ANALYSIS}:embed_text",
                          "Store the text embeddings of prompt sets."),
    "query": Command("pipeline.analyses.query:QueryConfig", f"{_ANALYSIS}:query",
                     "Reward-quality questions over a store: tables, JSON and PNG plots."),
    "reward-quality": Command("pipeline.jobs.reward_quality:RewardQualityConfig", f"{_ANALYSIS}:reward_quality",
                              "Acceptance metrics of a reward model beside a random-weight one."),
    "alpha-sweep": Command("pipeline.analyses.alpha_sweep:AlphaSweepConfig", f"{_ANALYSIS}:alpha_sweep",
                           "Scores for every alpha from stored embeddings (paper Fig. 10/11)."),
    "per-view-analysis": Command("pipeline.analyses.per_view:PerViewConfig", f"{_ANALYSIS}:per_view",
                                 "Per-view vs mean scores, smoothness and disagreement (paper Fig. 3/8)."),
    "bc-labels": Command("pipeline.export.bc_labels:BCLabelsConfig", f"{_ANALYSIS}:bc_labels",
                         "Rule-phase labels on rollouts of a policy (Stage-2 behaviour-cloning data).",
                         aliases={"--out": "--store"}),  # its store option's name before it had a flow
    "return-ranking": Command("pipeline.analyses.return_ranking:ReturnRankingConfig", f"{_ANALYSIS}:return_ranking",
                              "ROC AUC of successful vs failed episodes for each reward variant."),
    "diagnose-rollouts": Command("pipeline.analyses.rollout_diagnosis:DiagnoseRolloutsConfig", f"{_ANALYSIS}:diagnose_rollouts",
                                 "A policy's own rollouts: VLM vs dense reward, a montage, reward gaming."),
    "gate-set": Command("pipeline.jobs.gate_set:GateSetConfig", f"{_ANALYSIS}:gate_set",
                        "Off-expert gate set: noisy experts and learner checkpoints rendered and embedded."),
    "prompt-study": Command("pipeline.analyses.prompt_study:PromptStudyConfig", f"{_ANALYSIS}:prompt_study",
                            "Rank prompt sets on one store from stored embeddings."),
    "qualify": Command("pipeline.qualify.step:QualifyConfig", f"{_ANALYSIS}:qualify",
                       "Will a scorer teach? Metrics on the qualification set, the battery, the map's verdict "
                       "('qualify fit-map' refits the map)."),
    "qualify fit-map": Command("pipeline.qualify.fit:FitMapConfig", "pipeline.qualify.fit:fit_map_command",
                               "Refit the learnability map that 'rmtl qualify' reads from finished runs."),
    "export minari": Command("pipeline.export.minari_export:ExportMinariConfig", f"{_ANALYSIS}:export_minari",
                             "Write a store's episodes as a Minari dataset."),
    "export lerobot": Command("pipeline.export.lerobot_export:ExportLeRobotConfig", f"{_ANALYSIS}:export_lerobot",
                              "Write a store's episodes and frames as a LeRobot v3.0 dataset."),
    "view": Command("pipeline.view.config:ViewConfig", "pipeline.view.command:view",
                    "Look at the reward: a store's episodes or a policy's rollouts as a Rerun recording or an HTML page."),
}
"""Command words -> the command."""
