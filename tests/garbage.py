"""Strategies for hostile input shared by the parser properties.

Random text rarely reaches the inputs that break parsers, so these aim at them: deeply
nested JSON (``json.loads`` raises ``RecursionError``, not ``ValueError``, past ~1000
levels), integers beyond a float or beyond Python's 4300-digit ``int()`` limit, and
JSON documents of arbitrary shape.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

__all__ = ["deep_json", "huge_digits", "json_docs", "json_text", "json_values"]

#: "[[[[...", "{"a":{"a":..." and friends, deep enough to exhaust the recursion limit
deep_json = st.builds(
    lambda opener, n, tail: opener * n + tail,
    st.sampled_from(["[", '{"a":', '{"endpoint":', "[{\"x\":"]),
    st.integers(min_value=900, max_value=5000),
    st.sampled_from(["", "1", "]", "}"]))

#: decimal numerals around and past int()'s 4300-digit limit, and past a float's range
huge_digits = st.one_of(
    st.integers(min_value=309, max_value=400).map(lambda n: "9" * n),
    st.integers(min_value=4290, max_value=6000).map(lambda n: "1" * n))

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
    | st.text(max_size=20) | st.integers(min_value=309, max_value=400).map(lambda n: 10**n),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20)

#: JSON documents as text (NaN/Infinity included, as Python's json writes them)
json_docs = json_values.map(json.dumps)

#: anything a peer could send as JSON text: documents, deep nesting, random text
json_text = st.one_of(json_docs, deep_json, st.text(max_size=200))
