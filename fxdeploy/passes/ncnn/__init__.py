"""The ncnn respellings: graph rewrites that change no outputs and exist only because pnnx or ncnn
cannot take a construct as torch.export spells it (``docs/internals.md`` lists each hole).

Only the ncnn pipeline (``passes/pipelines.py``) runs them; the generic passes sit one level up.
"""
