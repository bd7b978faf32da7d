"""The ncnn stage plan: a manifest's plan round-trips, bad data is refused by key, and an artifact
saved before stages reads as the two stages it describes. No torch, no ncnn needed."""

from __future__ import annotations

import ast
import copy
from pathlib import Path
from typing import Any

import pytest

from fxdeploy.errors import ArtifactError
from fxdeploy.partition import Engine, EngineOutput, Host, HostOp, Plan, Source, Stage

ROOT = Path(__file__).resolve().parents[2] / "fxdeploy"

PLAN = Plan(
    stages=(
        Stage((Source.graph_input(0),), Engine("model.ncnn.param", "model.ncnn.bin", ("in0",),
                                               (EngineOutput("out0", (-1, 4), "float32"),), id_inputs=((0, 30522),),
                                               grouped_inputs=((0, 3),))),
        Stage((Source(0, 0), Source.graph_input(0)), Host("host.1.pt", (HostOp("aten.topk.default", "no layer"),))),
        Stage((), None),
        Stage((Source(1, 0),), Engine("model.3.ncnn.param", "model.3.ncnn.bin", ("in0",),
                                      (EngineOutput("out0", (5,), "int64"), EngineOutput("out1", (3, 4), "float32", 2)),
                                      batched_inputs=True)),
    ),
    outputs=(Source(3, 0), Source(1, 1)),
)


def test_a_plan_round_trips_through_its_manifest_form() -> None:
    data = PLAN.to_dict()
    assert [stage["kind"] for stage in data["stages"]] == ["engine", "host", "empty", "engine"]
    assert data["stages"][1]["sources"] == [[0, 0], ["input", 0]]
    assert Plan.from_dict(data, ["x"]) == PLAN


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("outputs"), "manifest info.ncnn: 'outputs' is missing"),
        (lambda d: d["stages"][0].update(kind="gpu"), "'kind' must be 'engine', 'host' or 'empty', got 'gpu'"),
        (lambda d: d["stages"][0].update(param="../../etc/passwd"), "'param' must be a file name in the artifact"),
        (lambda d: d["stages"][1].update(file=7), "stages[1]: 'file' must be str, got int 7"),
        (lambda d: d["stages"][0]["outputs"][0].update(shape=[1, "2"]), "a dim of 'shape' must be int, got str '2'"),
        (lambda d: d["stages"][1]["sources"].append([1, 0]), "stages[1].sources: expected an int in [0, 1), got int 1"),
        (lambda d: d["stages"][0].update(batched_inputs=1), "'batched_inputs' must be bool, got int 1"),
        (lambda d: d["stages"][3].update(shared_inputs=[2]), "shared_inputs: expected an int in [0, 1), got int 2"),
        (lambda d: d["stages"][3]["outputs"][1].update(batch_axis=3), "batch_axis: expected an int in [0, 3), got"),
        (lambda d: d["stages"][0].update(id_inputs=[[1, 8]]), "id_inputs: expected an int in [0, 1), got int 1"),
        (lambda d: d["stages"][0].update(grouped_inputs=[[0, 0]]), "grouped_inputs: rows must be >= 1, got 0"),
        (lambda d: d["stages"][0].update(id_inputs=[0]), "id_inputs: an entry must be [input, rows], got 0"),
        (lambda d: d["stages"][0].update(id_inputs=[[0, "8"]]), "id_inputs: rows must be int, got str '8'"),
        (lambda d: d.update(outputs=[["input", True]]), "outputs: expected an int in [0, 1), got bool True"),
        (lambda d: d.update(stages={"0": {}}), "'stages' must be list, got dict"),
    ],
)
def test_bad_plan_data_names_the_key_and_what_it_expected(edit: Any, message: str) -> None:
    data = copy.deepcopy(PLAN.to_dict())
    edit(data)
    with pytest.raises(ArtifactError, match="manifest info.ncnn") as info:
        Plan.from_dict(data, ["x"])
    assert message in str(info.value)


def test_a_plan_saved_before_stages_reads_as_engine_and_host_tail() -> None:
    """Keys "head_outputs", "host_tail" and "tail_inputs"; sources named "head" and "tail"."""
    head = [{"blob": "out0", "shape": [4], "dtype": "float32"}]
    old = {"inputs": [{"name": "y", "blob": "in0"}], "head_outputs": head, "host_tail": "host_tail.pt",
           "tail_inputs": [["head", 0], ["input", 1]], "outputs": [["tail", 0], ["head", 0]]}
    plan = Plan.from_dict(old, ["x", "y"])
    assert [stage.kind for stage in plan.stages] == ["engine", "host"]
    assert plan.stages[0].sources == (Source.graph_input(1),)
    assert plan.stages[0].work == Engine("model.ncnn.param", "model.ncnn.bin", ("in0",),
                                         (EngineOutput("out0", (4,), "float32"),))
    assert plan.stages[1] == Stage((Source(0, 0), Source.graph_input(1)), Host("host_tail.pt"))
    assert plan.outputs == (Source(1, 0), Source(0, 0))
    with pytest.raises(ArtifactError, match="tail_inputs"):
        Plan.from_dict({**old, "tail_inputs": [["middle", 0]]}, ["x", "y"])


def test_host_ops_saved_as_bare_names_still_load() -> None:
    data = PLAN.to_dict()
    data["stages"][1]["ops"] = ["aten.topk.default"]
    host = Plan.from_dict(data, ["x"]).stages[1].work
    assert isinstance(host, Host) and [op.op for op in host.ops] == ["aten.topk.default"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return found | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_the_runtime_reads_the_plan_without_the_capture_and_pass_machinery() -> None:
    """The runtime never imports torch.export machinery; the lowering never imports the runtime."""
    heavy = ("torch", "fxdeploy.passes", "fxdeploy.partition.cut", "fxdeploy.partition.host_nodes",
             "fxdeploy.capture", "fxdeploy.lowering", "fxdeploy.runtime")
    lights = (ROOT / "partition" / "plan.py", ROOT / "partition" / "__init__.py", ROOT / "artifact" / "ncnn_net.py")
    for light in lights:
        assert not {m for m in _imports(light) if m.startswith(heavy)}, light
    runtime = _imports(ROOT / "runtime" / "ncnn.py")
    assert not {m for m in runtime if m.startswith(heavy[1:-1]) or m.startswith("torch.export")}
    for lowering in (ROOT / "lowering").glob("ncnn*.py"):
        assert not {m for m in _imports(lowering) if m.startswith("fxdeploy.runtime")}, lowering
