"""The flows import their own top-level ``storage`` package even when ``prefect/runner`` (which
holds a ``storage.py``) is first on ``sys.path``, as it is when a Prefect runner executes a flow
run's on_crashed hooks (``python .../prefect/runner/_workspace_runtime_bootstrap.py hook
crashed ...``): a training flow's crash hook runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOOKED_MODULE = '''
import os
from pathlib import Path

from flows.train import train_stage1_flow


def mark(flow, flow_run, state):
    import storage.errors

    Path(os.environ["RMTL_TEST_HOOK_MARK"]).write_text(
        f"{flow.name} {state.type.value} {storage.errors.__file__}")


hooked_train_stage1 = train_stage1_flow.with_options(on_crashed=[mark])
'''


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_LOGGING_TO_API_ENABLED": "false", "RMTL_DATA_DIR": str(tmp_path / "data")}


def test_the_flows_import_with_prefects_runner_first_on_sys_path():
    """prefect/runner first on sys.path (what Prefect's hook bootstrap script gets): the flows
    and the project's storage package still import."""
    code = ("import sys, os, prefect.runner; sys.path.insert(0, os.path.dirname(prefect.runner.__file__)); "
            "import flows.train, flows.render_and_embed, flows.analysis, storage.errors, storage.dataset; "
            "print(storage.errors.__file__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[0] == str(ROOT / "storage" / "errors.py")


def test_a_training_flow_crash_hook_runs_through_prefects_hook_runner(tmp_path):
    """Prefect's own hook runner (the one a runner uses after a flow-run process crashed) starts
    its bootstrap script as a script, loads the training flow by its module path and runs its
    on_crashed hook."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.runner._workspace_hook_runner import WorkspaceHookRunner
    from prefect.runner._workspace_runtime import PreparedWorkspaceManifest, write_private_model
    from prefect.runner._workspace_supervisor import _hook_command
    from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED, temporary_settings
    from prefect.states import Crashed

    (tmp_path / "crash_hooked_flow.py").write_text(HOOKED_MODULE)
    mark = tmp_path / "hook-ran.txt"
    env = {**_env(tmp_path), "RMTL_TEST_HOOK_MARK": str(mark)}
    command = _hook_command([sys.executable, "-m", "prefect.engine"])
    assert command is not None and command[1].endswith("_workspace_runtime_bootstrap.py")  # run as a script
    manifest = tmp_path / "workspace" / "manifest.json"
    write_private_model(manifest, PreparedWorkspaceManifest(
        working_directory=tmp_path, runtime_entrypoint="crash_hooked_flow.hooked_train_stage1",
        hook_command=command, environment=env))
    flow_run = FlowRun(id=uuid.uuid4(), name="crashed-run", flow_id=uuid.uuid4())
    runner = WorkspaceHookRunner(manifest_path=manifest, stream_output=True)
    with temporary_settings(updates={PREFECT_LOGGING_TO_API_ENABLED: False}):  # no API in this process
        asyncio.run(runner.run_crashed_hooks(flow_run, Crashed(message="the flow-run process was killed")))
    assert mark.is_file(), "the on_crashed hook did not run (see the hook process's output above)"
    name, state, errors_file = mark.read_text().split(" ")
    assert (name, state) == ("train-stage1", "CRASHED")
    assert Path(errors_file) == ROOT / "storage" / "errors.py"


def test_pinned_storage_replaces_a_shadowing_module(tmp_path):
    """A ``storage`` module imported from elsewhere before the flows is replaced by the project's."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "storage.py").write_text("WHO = 'shadow'\n")
    code = (f"import sys; sys.path.insert(0, {str(shadow)!r}); import storage; assert storage.WHO == 'shadow'; "
            "import flows; import storage.errors, rmtl.errors, sys; "
            "print(sys.modules['storage'].__file__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=_env(tmp_path))
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.dumps(run.stdout.splitlines()[0]) == json.dumps(str(ROOT / "storage" / "__init__.py"))
