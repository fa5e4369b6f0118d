"""An export's Arrow schema as the `features` list of a dataset card's `dataset_info` (the Hub's YAML form).

Written without `datasets` (a test-only dependency here): the same YAML `datasets.Features._to_yaml_list` writes for
the types exports use (strings, integers, floats, booleans, lists and structs), which a test checks against
`datasets` itself.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..errors import OutputError

_SIMPLE = {
    pa.string(): "string",
    pa.large_string(): "large_string",
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.float32(): "float32",
    pa.float64(): "float64",
}


def yaml_features(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"name": field.name, **_type(field.type)} for field in schema]


def _type(t: pa.DataType) -> dict[str, Any]:
    if t in _SIMPLE:
        return {"dtype": _SIMPLE[t]}
    if pa.types.is_struct(t):
        return {"struct": [{"name": t.field(i).name, **_type(t.field(i).type)} for i in range(t.num_fields)]}
    if pa.types.is_list(t):
        inner = t.value_type
        if pa.types.is_struct(inner):
            return {"list": _type(inner)["struct"]}
        return {"list": _type(inner)["dtype"] if "dtype" in _type(inner) else _type(inner)}
    raise OutputError(f"no dataset-card feature type for Arrow type {t}")


def size_category(rows: int) -> str:
    """The Hub's `size_categories` label for a row count."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")]
    bounds += [(10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B")]
    for bound, label in bounds:
        if rows < bound:
            return label
    return "n>1T" if rows >= 10**12 else "1B<n<10B"
