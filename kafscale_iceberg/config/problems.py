"""From pydantic's errors to `ConfigValidationError`'s lines: every problem, named by its key path
(`mappings[0].partition_by[1]`), with the allowed values where the setting is an enumeration, and a
value under a secret-bearing key never echoed. Also finds the keys no setting uses (unknown keys).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from kafscale_iceberg.config.base import _SECTION_PROBLEMS, _VALUE_PROBLEM
from kafscale_iceberg.config.model import KafscaleConfig

# A bad value under these keys is never echoed back: it may be (or contain) a secret.
_SECRET_KEYS = frozenset({"password", "token", "properties", "spark_conf"})


def _model_of(annotation: object) -> tuple[type[BaseModel], bool] | None:
    """The config model an annotation holds, and whether it is a list of them; None for plain values."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _model_of(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
        return None
    if origin in (tuple, list):
        inner = _model_of(get_args(annotation)[0])
        return (inner[0], True) if inner is not None else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None


def _find_unknown_keys(data: object, model: type[BaseModel], path: str) -> list[str]:
    """Paths of keys in raw `data` that `model` (recursively) has no field for."""
    if not isinstance(data, Mapping):
        return []
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    found: list[str] = []
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        field = fields.get(key) if isinstance(key, str) else None
        if field is None:
            found.append(key_path)
            continue
        nested = _model_of(field.annotation)
        if nested is None:
            continue
        nested_model, is_list = nested
        if is_list and isinstance(value, list):
            for index, item in enumerate(value):
                found += _find_unknown_keys(item, nested_model, f"{key_path}[{index}]")
        elif not is_list:
            found += _find_unknown_keys(value, nested_model, key_path)
    return found


def _format_key(location: tuple[int | str, ...], relative: str = "") -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    if relative:
        text += relative if relative.startswith("[") or not text else f".{relative}"
    return text


def _allowed_values_at(location: tuple[int | str, ...]) -> tuple[str, ...]:
    """The Literal values allowed at a key path, when its setting is an enumeration."""
    annotation: object = KafscaleConfig
    for part in location:
        nested = _model_of(annotation)
        if nested is None:
            return ()
        model, is_list = nested
        if is_list and isinstance(part, int):
            annotation = model
            continue
        fields = {field.alias or name: field for name, field in model.model_fields.items()}
        if not isinstance(part, str) or part not in fields:
            return ()
        annotation = fields[part].annotation
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return tuple(str(member.value) for member in annotation)
    return tuple(str(value) for value in get_args(annotation)) if get_origin(annotation) is Literal else ()


def _show(value: object, location: tuple[int | str, ...]) -> str:
    if any(part in _SECRET_KEYS for part in location):
        return "a value that is not shown (the key may hold a secret)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_BUILTIN_PROBLEMS: Mapping[str, Callable[[dict[str, Any], str], str]] = {
    "literal_error": lambda ctx, got: f"{got} is not allowed; allowed values: {ctx.get('expected', '')}",
    "enum": lambda ctx, got: f"{got} is not allowed; allowed values: {ctx.get('expected', '')}",
    "int_parsing": lambda _, got: f"must be a whole number, got {got}",
    "int_type": lambda _, got: f"must be a whole number, got {got}",
    "int_from_float": lambda _, got: f"must be a whole number, got {got}",
    "bool_parsing": lambda _, got: f"must be true or false, got {got}",
    "bool_type": lambda _, got: f"must be true or false, got {got}",
    "string_type": lambda _, got: f"must be a string, got {got}",
    "tuple_type": lambda _, got: f"must be a list, got {got}",
    "list_type": lambda _, got: f"must be a list, got {got}",
    "model_type": lambda _, got: f"must be a mapping of keys, got {got}",
    "model_attributes_type": lambda _, got: f"must be a mapping of keys, got {got}",
    "dict_type": lambda _, got: f"must be a mapping of keys, got {got}",
    "mapping_type": lambda _, got: f"must be a mapping of keys, got {got}",
    "greater_than": lambda ctx, got: f"must be > {ctx.get('gt')}, got {got}",
    "greater_than_equal": lambda ctx, got: f"must be >= {ctx.get('ge')}, got {got}",
    "byte_size": lambda _, got: f"must be a size in bytes (a number, or e.g. 128MiB, 1GiB), got {got}",
    "byte_size_unit": lambda _, got: (
        f"must be a size in bytes with a known unit (B, KiB, MiB, GiB, KB, MB, GB), got {got}"
    ),
}


def _problems_from(exc: ValidationError) -> list[tuple[str, str]]:
    """Translate pydantic's errors into (key path, problem) lines, every one, secrets never shown."""
    problems: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        location = tuple(error["loc"])
        context = error.get("ctx") or {}
        kind = error["type"]
        if kind == _SECTION_PROBLEMS:
            problems += [
                (_format_key(location, relative), problem) for relative, problem in context["problems"]
            ]
        elif kind == _VALUE_PROBLEM:
            problems.append((_format_key(location), str(context["message"])))
        elif kind == "missing":
            allowed = _allowed_values_at(location)
            problems.append(
                (
                    _format_key(location),
                    "is required" + (f"; allowed values: {', '.join(allowed)}" if allowed else ""),
                )
            )
        else:
            got = _show(error.get("input"), location)
            describe = _BUILTIN_PROBLEMS.get(kind)
            problem = describe(context, got) if describe else f"{error['msg']}, got {got}"
            problems.append((_format_key(location), problem))
    return problems
