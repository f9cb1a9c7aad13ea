"""Null where the schema allows none, and strings longer than their encoding allows:
the checks Kafka's generated readers make.

kafka-python's decoders read a length of -1 as ``None`` for every array, string and
struct, whatever the field's ``nullableVersions``; Kafka's readers throw "non-nullable
field X was serialized as null" and the broker closes the connection. Handlers may
then take every list and string as present. ``invalid_field`` walks a decoded message
along its schema (untagged fields of the version: an absent tagged field takes its
default) and names the first such field; the plan of each (field, version) is built once.
"""

from __future__ import annotations

from typing import Any

STRING_BYTES_MAX = 0x7FFF

# (attribute name, field, nullable, kind): kind 0 a scalar, 1 a struct, 2 an array of
# structs, 3 an array of scalars (whose elements are never null).
_Step = tuple[str, Any, bool, int]
_plans: dict[tuple[int, int], tuple[_Step, ...]] = {}


def _plan(struct: Any, version: int) -> tuple[_Step, ...]:
    key = (id(struct), version)
    plan = _plans.get(key)
    if plan is None:
        steps = []
        for field in struct.untagged_fields(version):
            if field.is_struct_array():
                kind = 2
            elif field.is_array():
                kind = 3
            elif field.is_struct():
                kind = 1
            else:
                kind = 0
            steps.append((field.name, field, bool(field.nullable_for_version_q(version)), kind))
        plan = _plans[key] = tuple(steps)
    return plan


def invalid_field(struct: Any, message: Any, version: int, path: str = "") -> str | None:
    """What is wrong with the first field of ``message`` (decoded by ``struct``, a
    kafka-python ``StructField``) that is null where version ``version`` allows no null
    or a string over ``STRING_BYTES_MAX`` bytes; None if nothing is."""
    for name, field, nullable, kind in _plan(struct, version):
        value = getattr(message, name, None)
        where = f"{path}{name}"
        if value is None:
            if nullable or field.type_str in _NULLABLE_SCALARS:
                continue
            return f"non-nullable field {where} is null"
        if kind == 0:
            found = _long_string(value, where)
        elif kind == 1:
            found = invalid_field(field, value, version, where + ".")
        elif kind == 2:
            found = None
            for i, item in enumerate(value):
                found = invalid_field(field, item, version, f"{where}[{i}].")
                if found is not None:
                    break
        else:  # kind 3
            found = None
            for i, v in enumerate(value):
                found = (f"non-nullable field {where}[{i}] is null" if v is None
                         else _long_string(v, f"{where}[{i}]"))
                if found is not None:
                    break
        if found is not None:
            return found
    return None


def _long_string(value: Any, where: str) -> str | None:
    # A str of n characters has at most 4n bytes in UTF-8: most are never encoded.
    if isinstance(value, str) and len(value) * 4 > STRING_BYTES_MAX:
        size = len(value.encode())
        if size > STRING_BYTES_MAX:
            return f"string field {where} is {size} bytes, over {STRING_BYTES_MAX}"
    return None


#: Types whose ``None`` is not a null on the wire (``records`` is nullable bytes in every
#: schema that has it; a uuid of zeros may decode as ``None``).
_NULLABLE_SCALARS = frozenset({"records", "uuid"})
