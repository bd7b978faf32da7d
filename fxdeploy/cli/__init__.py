"""The ``fxdeploy`` command line: lower, run, check-env, bench, compare, export-triton.

``main`` parses and dispatches (``main.py``); each group of commands has its module: ``bench``
(bench, compare), ``triton`` (export-triton), ``settings`` (flags generated from the settings
dataclasses), ``shapes`` (``--dynamic``/``--shape``), ``model_spec`` (``file.py:factory``) and ``checks`` (every
argument checked before any work: one line and exit code 2).
"""

from fxdeploy.cli.main import main

__all__ = ["main"]
