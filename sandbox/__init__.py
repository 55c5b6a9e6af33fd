"""Isolated, stateful Python execution that can call back into host functions.

Knows nothing about LLMs. See :func:`open_sandbox` for the usual entry point.
"""
