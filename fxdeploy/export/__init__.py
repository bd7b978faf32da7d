"""Exports of an artifact into other serving layouts (Triton Inference Server's model repository).

An export reads a saved artifact as data (``artifact.read_manifest``); it never re-lowers.
"""
