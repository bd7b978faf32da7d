"""``import fxdeploy`` imports no optional runtime; lowering for one target imports only its own."""

from __future__ import annotations

from tests.helpers import run_python

OPTIONAL = ("openvino", "ncnn", "pnnx", "tensorrt")
CHECK = "print(sorted(m for m in {optional!r} if m in sys.modules))\n"


def test_import_fxdeploy_imports_no_optional_runtime() -> None:
    out = run_python("import sys, fxdeploy\n" + CHECK.format(optional=OPTIONAL))
    assert out.strip() == "[]"


def test_lowering_for_onnxruntime_imports_no_other_runtime() -> None:
    code = (
        "import sys, fxdeploy\nfrom examples import models\n"
        "model, inputs = models.dict_mlp()\n"
        "fxdeploy.lower(model, inputs, target='onnxruntime')\n" + CHECK.format(optional=OPTIONAL)
    )
    assert run_python(code).strip() == "[]"
