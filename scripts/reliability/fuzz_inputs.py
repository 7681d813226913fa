"""Hypothesis strategies of ``fuzz_parsers.py``: edits of valid documents and bytes, arbitrary JSON and bytes.

Structured edits replace, delete or add JSON values (NaN, ``1e400``, ``10**400``, wrong types); byte edits flip,
truncate, splice tokens (NaN, 5000 digits, deep nesting); a checkpoint's pickle is edited inside its zip.
"""

from __future__ import annotations

import copy
import io
import json
import math
import zipfile
from typing import Any

from hypothesis import strategies as st

HUGE_INT = 10**400
INTERESTING: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**31,
    2**63,
    2**64,
    -(2**63),
    2**128 + 1,
    HUGE_INT,
    -HUGE_INT,
    0.0,
    -0.0,
    1e-320,
    1e308,
    -1e308,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "x",
    "0",
    "1e400",
    "NaN",
    "PCG64",
    "../../etc/passwd",
    "/abs/path",
    "a\x00b",
    "members/000/checkpoints/g0000_f000000000000.pth",
    "f" * 64,
    [],
    {},
    [None],
    [math.nan],
    {"": None},
    {"checkpoint": 1},
    [[[]]],
    {"time": "x", "checkpoint": []},
]
"""Values that tend to break parsers: type confusions, bool-as-int, non-finite and huge numbers."""

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**130), max_value=2**130),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(INTERESTING),
)
json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=16,
)
"""Arbitrary JSON-like values (NaN and Infinity included, since ``json.loads`` accepts them)."""


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


def _get(obj: Any, path: tuple) -> Any:
    for p in path:
        obj = obj[p]
    return obj


@st.composite
def mutated_json(draw: Any, base: Any) -> Any:
    """``base`` with 1-4 edits: replace a value, delete a key / item, add an unknown key, wrap a value."""
    obj = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(obj)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "replace", "interesting", "delete", "add", "wrap", "scale"]))
        if op == "scale":  # a number far out of the usual range, but finite: statistics over it may overflow
            target = _get(obj, path)
            if path and isinstance(target, (int, float)) and not isinstance(target, bool):
                _get(obj, path[:-1])[path[-1]] = draw(st.sampled_from([1e155, -1e155, 1e200, -1e300, 1.7e308]))
            continue
        if op in ("replace", "interesting"):
            value = draw(json_values) if op == "replace" else draw(st.sampled_from(INTERESTING))
            if not path:
                obj = copy.deepcopy(value)
            else:
                _get(obj, path[:-1])[path[-1]] = copy.deepcopy(value)
        elif op == "delete" and path:
            parent = _get(obj, path[:-1])
            del parent[path[-1]]
        elif op == "add":
            target = _get(obj, path)
            # Deep copies throughout: drawn values may be shared objects (INTERESTING's [] and {}), and
            # editing them in place would change what later draws return.
            if isinstance(target, dict):
                target[draw(st.text(max_size=10))] = copy.deepcopy(draw(json_values))
            elif isinstance(target, list):
                target.insert(draw(st.integers(0, len(target))), copy.deepcopy(draw(json_values)))
        elif op == "wrap" and path:
            parent = _get(obj, path[:-1])
            parent[path[-1]] = draw(st.sampled_from([lambda v: [v], lambda v: {"v": v}, str]))(parent[path[-1]])
    return obj


def dumps_loose(obj: Any) -> bytes:
    """JSON as a careless or foreign writer might produce it: NaN/Infinity allowed, any indentation."""
    return json.dumps(obj, allow_nan=True).encode()


TOKENS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"9" * 5000,
    b"[" * 10_000,
    b"{" * 3000,
    b"\xff\xfe",
    b"\x00",
    b'"',
    b"\\",
    b",",
    b"}",
    b"]",
    b"null",
    b"true",
    b"-",
    b"\n",
    b"\xc3(",
    b'"\\ud800"',
]


@st.composite
def mutated_bytes(draw: Any, base: bytes) -> bytes:
    """``base`` with 1-4 byte-level edits."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        n = len(data)
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "duplicate", "token"]))
        pos = draw(st.integers(0, max(0, n - 1)))
        if op == "flip" and n:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and n:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and n:
            del data[pos : pos + draw(st.integers(1, 64))]
        elif op == "truncate":
            del data[pos:]
        elif op == "duplicate" and n:
            end = min(n, pos + draw(st.integers(1, 64)))
            data[pos:pos] = data[pos:end]
        elif op == "token":
            token = draw(st.sampled_from(TOKENS))
            if draw(st.booleans()):
                data[pos : pos + len(token)] = token
            else:
                data[pos:pos] = token
    return bytes(data)


SPECIAL_FILES = [
    b"",
    b"\n",
    b"null",
    b"[]",
    b"{}",
    b"0",
    b"NaN",
    b"\xff\xfe",
    b"[" * 100_000,
    b'{"a":' * 50_000,
    b"9" * 5000,
    b"[" + b"1" * 5000 + b"]",
    b"1e400",
    b"-Infinity",
    b'"\\ud800"',
    b"\x00" * 64,
]
"""Whole files that broke parsers elsewhere: empty, deep nesting, 5000-digit integers, lone surrogates."""


def json_file_inputs(base: Any) -> st.SearchStrategy[bytes]:
    """Bytes of a JSON workspace file: structured edits, byte edits, arbitrary JSON, arbitrary bytes."""
    valid = json.dumps(base, sort_keys=True, indent=1).encode() + b"\n"
    return st.one_of(
        mutated_json(base).map(dumps_loose),
        mutated_bytes(valid),
        json_values.map(dumps_loose),
        st.binary(max_size=256),
        st.sampled_from(SPECIAL_FILES),
    )


def json_value_inputs(base: Any) -> st.SearchStrategy[Any]:
    return st.one_of(mutated_json(base), mutated_json(base), json_values)


@st.composite
def pickle_mutated_checkpoint(draw: Any, base: bytes) -> bytes:
    """The checkpoint zip with its ``data.pkl`` edited and re-zipped with correct CRCs."""
    with zipfile.ZipFile(io.BytesIO(base)) as zin:
        entries = [(info, zin.read(info.filename)) for info in zin.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for info, payload in entries:
            if info.filename.endswith("data.pkl"):
                payload = draw(mutated_bytes(payload))
            zout.writestr(info.filename, payload)
    return out.getvalue()
