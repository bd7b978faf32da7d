"""fxdeploy inside other systems.

- ``backends``: the ``torch.compile`` backends (``fxdeploy_ort``, ...), registered through the
  ``torch_dynamo_backends`` entry-point group, and ``make_backend`` for a plugin target's own.
- ``triton`` and ``triton_config``: a saved artifact as one model of a Triton Inference Server
  model repository. An export reads the artifact as data (``artifact.read_manifest``); it never
  re-lowers.
"""
