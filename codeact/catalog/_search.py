"""Ranking tools for a query: BM25 (the ``bm25s`` library) over names, descriptions and parameters.

Each tool is one document: its name and namespace (split into words:
``list_open_invoices`` -> list, open, invoices; ``getUser`` -> get, user),
counted twice so that a word in the name weighs more than one in the prose,
then its description and its parameters' names and descriptions. Words are
lower-cased, English stop words dropped and the rest stemmed (Snowball, via
PyStemmer) so that "invoices" finds ``get_invoice``. The scoring is
``bm25s``'s; this module only prepares the words.

A request often has several needs ("find the customer X, list their
invoices, then total the overdue ones"). Besides the whole query, each of its
parts (sentences, and clauses that start with an action verb after "and",
"then" or a comma) is ranked on its own, and the rankings are interleaved:
each part's best match, then each part's second, ... (duplicates dropped).
So the tool for every need reaches the first results, not only the tools of
the need the query mentions most. A part is ranked by its own words plus a
little of the part before it and of the whole request (a part such as "list
its coupons" names its subject only by reference). A query of one part ranks
as plain BM25. Each query term counts once.

Example::

    index = SearchIndex([("tools.crm.find_customer", "find customer crm", "Find a customer by name.")])
    index.search("look up a customer", limit=5)    # [(0, 1.23)]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

#: Most characters of a query that are read (a query is sandbox input: hostile and unbounded).
MAX_QUERY_CHARS = 2_000

#: Most parts of a query that are ranked on their own.
MAX_PARTS = 12
#: How much the part before and the whole request weigh when a part is ranked (its own words weigh 1).
PREVIOUS_PART_WEIGHT = 0.2
WHOLE_QUERY_WEIGHT = 0.1

_WORD = re.compile(r"[A-Za-z]+|\d+")
_VERBS = (r"(?:list|get|search|find|look|give|count|tell|show|fetch|check|compute|calculate|sum|add|send|create|"
          r"update|delete|remove|open|close|read|write|save|book|cancel|which|what|how|who|when|where)")
_PARTS = re.compile(r"[.?!;:]+(?:\s+|$)|\n+|,?\s+(?:and\s+)?then\s+|,\s*(?:and\s+)?(?=" + _VERBS + r"\b)"
                    r"|\s+and\s+(?=" + _VERBS + r"\b)", re.IGNORECASE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def query_parts(query: str) -> list[str]:
    """The parts of a request: its sentences, and clauses that start with an action verb.

    >>> query_parts("Find the customer Acme, list their invoices and then total them.")
    ['Find the customer Acme', 'list their invoices', 'total them']
    """
    return [p.strip() for p in _PARTS.split(query) if p and p.strip()][:MAX_PARTS]


def words(text: str) -> list[str]:
    """Lower-case words of ``text``; identifiers are split at ``_``, ``.``, ``-`` and camelCase humps."""
    out: list[str] = []
    for chunk in re.split(r"[^A-Za-z0-9]+", text):
        if not chunk:
            continue
        for part in _CAMEL.split(chunk):
            out.extend(w.lower() for w in _WORD.findall(part))
    return out


class _Analyzer:
    """Words -> index terms: stop words out, the rest stemmed (when PyStemmer is installed)."""

    def __init__(self) -> None:
        from bm25s.stopwords import STOPWORDS_EN

        self.stopwords = frozenset(STOPWORDS_EN) | {"s", "t", "please", "me", "my", "i", "you", "your", "what",
                                                    "which", "how", "many", "much", "give", "tell", "then"}
        try:
            import Stemmer

            self._stem = Stemmer.Stemmer("english").stemWords
        except ImportError:  # still useful without stemming: exact words match
            self._stem = None

    def terms(self, text: str) -> list[str]:
        kept = [w for w in words(text) if w not in self.stopwords]
        return list(self._stem(kept)) if self._stem is not None and kept else kept


class SearchIndex:
    """A BM25 index over documents given as ``(key, name_text, body_text)``.

    ``search`` returns ``(position, score)`` pairs, best first, only documents
    that share at least one term with the query; ties keep document order.
    """

    def __init__(self, documents: Sequence[tuple[str, str, str]]) -> None:
        import bm25s

        self._analyzer = _Analyzer()
        self.keys = [key for key, _, _ in documents]
        corpus = []
        for _, name, body in documents:
            name_terms = self._analyzer.terms(name)
            corpus.append(name_terms * 2 + self._analyzer.terms(body) or ["_"])
        self._size = len(corpus)
        self._bm25: Any = None
        if corpus:
            self._bm25 = bm25s.BM25()
            self._bm25.index(corpus, show_progress=False)

    def __len__(self) -> int:
        return self._size

    def search(self, query: str, limit: int = 10) -> list[tuple[int, float]]:
        """``(position, score)`` pairs, best first; the score is the whole query's BM25 score."""
        if self._bm25 is None or limit <= 0:
            return []
        query = query[:MAX_QUERY_CHARS]
        whole = self._scores(query)
        if whole is None:
            return []
        parts = query_parts(query)
        rankings: list[list[int]] = []
        if len(parts) > 1:
            previous = None
            for part in parts:
                own = self._scores(part)
                if own is None:
                    continue
                # A part often names its subject only by reference ("list its coupons"): a little of
                # the part before it and of the whole request tells "coupons of the campaign" from
                # "all coupons". Only tools that match the part itself are ranked for it.
                score = own + PREVIOUS_PART_WEIGHT * _scaled(previous, own) + WHOLE_QUERY_WEIGHT * _scaled(whole, own)
                rankings.append(self._ranked(score * (own > 0)))
                previous = own
        rankings.append(self._ranked(whole))  # every part's best, then the whole query's
        out: list[int] = []
        seen: set[int] = set()
        for depth in range(max(len(r) for r in rankings)):
            for ranking in rankings:
                if depth < len(ranking) and ranking[depth] not in seen:
                    seen.add(ranking[depth])
                    out.append(ranking[depth])
            if len(out) >= limit:
                break
        return [(i, float(whole[i])) for i in out[:limit]]

    def _scores(self, text: str) -> Any:
        """BM25 scores of every document for ``text`` (each term once), or None when no term is left."""
        terms = list(dict.fromkeys(self._analyzer.terms(text)))
        if not terms:
            return None
        import numpy as np

        scores = np.asarray(self._bm25.get_scores(terms), dtype=float)
        return scores if scores.max() > 0 else None

    def _ranked(self, scores: Any) -> list[int]:
        return [i for i in sorted(range(self._size), key=lambda i: (-float(scores[i]), i)) if scores[i] > 0]


def _scaled(scores: Any, like: Any) -> Any:
    """``scores`` scaled so that its best equals the best of ``like`` (0 when there are none)."""
    if scores is None:
        return 0.0
    return scores / scores.max() * like.max()
