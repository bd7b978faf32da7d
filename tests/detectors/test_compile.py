"""torch.compile(backend="fxdeploy_ort") on torch 2.14.1 (this leg's torch): TinyYolo's per-image
loop, a CenterNet decode at batch 3, and a graph fxdeploy refuses, which runs eagerly with one
warning. The same tests as tests/integrations/test_backends_fallback.py, which the core leg runs
on torch 2.13; dynamo differs between the two (2.14.1 once failed with "Cannot detect fake_mode")."""

from __future__ import annotations

from tests.integrations.test_backends_fallback import (  # noqa: F401 - collected here, on this leg's torch
    _fresh_dynamo,
    test_a_lowering_refusal_runs_the_graph_eagerly_with_one_warning,
    test_centernet_decode_at_batch_3,
    test_tiny_yolo_per_image_loop,
)
