"""The variables panel: the kernel's namespace listing (:mod:`codeact._namespace`), shown as text only."""

from __future__ import annotations

from .._namespace import (
    LISTING_CODE,
    LISTING_TIMEOUT,
    MARKER,
    MAX_LISTING_CHARS,
    MAX_NAME,
    MAX_REPR,
    MAX_TYPE,
    MAX_VARIABLES,
    Variable,
    VariableListing,
    parse_listing,
    printable,
    read_namespace,
)

__all__ = ["LISTING_CODE", "LISTING_TIMEOUT", "MARKER", "MAX_LISTING_CHARS", "MAX_NAME", "MAX_REPR", "MAX_TYPE",
           "MAX_VARIABLES", "Variable", "VariableListing", "parse_listing", "printable", "read_namespace"]
