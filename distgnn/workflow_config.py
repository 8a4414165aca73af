"""The workflow's config against its schema (workflow/schemas/config.schema.yaml): an unknown key
(a typo such as ``epoch:`` for ``epochs:``) named in one line, with its section and the nearest
valid key, before Snakemake's ``validate`` would dump the whole schema and config; and the
schema's name lists against the registries (:func:`registry_mismatch`)."""
from __future__ import annotations

import difflib
import os
from typing import Any

import yaml


def unknown_key(config: Any, schema: dict[str, Any], section: str = "") -> str | None:
    """One line naming the first key of ``config`` that ``schema`` does not allow (an object with
    ``additionalProperties: false``), its section and the nearest valid key; None when every key
    is known. Values are left to the schema's own validation."""
    if isinstance(config, dict):
        known = schema.get("properties", {})
        for key, value in config.items():
            if key in known:
                found = unknown_key(value, known[key], f"{section}.{key}" if section else str(key))
                if found:
                    return found
            elif schema.get("additionalProperties", True) is False:
                return _unknown(str(key), section, sorted(known))
    elif isinstance(config, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(config):
            found = unknown_key(item, schema["items"], f"{section}[{i}]")
            if found:
                return found
    return None


def _unknown(key: str, section: str, valid: list[str]) -> str:
    where = f"in section '{section}'" if section else "at the top level"
    nearest = difflib.get_close_matches(key, valid, n=1)
    hint = f"did you mean '{nearest[0]}'?" if nearest else f"valid keys: {', '.join(valid)}"
    return f"unknown key '{key}' {where} ({hint})"


def unknown_key_in(config: dict[str, Any], schema_path: str | os.PathLike) -> str | None:
    """:func:`unknown_key` against the schema file at ``schema_path``."""
    with open(schema_path) as f:
        return unknown_key(config, yaml.safe_load(f))


def registry_mismatch(schema: dict[str, Any]) -> str | None:
    """The one check that the schema's name lists are the registries' (models and cd-r rules
    are registered in code: distgnn.models.registry, distgnn.exchange.rules): one line naming the
    first key whose ``enum`` differs from the built-in names, or None. The Snakefile runs it at
    load; a test runs it on the shipped schema."""
    from distgnn.exchange.rules import BUILT_IN as RULES
    from distgnn.models.registry import BUILT_IN as MODELS, IMPORT_PATH

    train = schema.get("properties", {}).get("train", {}).get("properties", {})
    for key, names in (("model", MODELS), ("cdr_rule", RULES)):
        entry = train.get(key, {})
        # model: a built-in name (the enum) or a user's import path (the other branch of anyOf)
        enum = tuple(next((b["enum"] for b in entry.get("anyOf", []) if "enum" in b), entry.get("enum", ())))
        if sorted(enum) != sorted(names):
            return (f"the config schema's train.{key} lists {', '.join(enum)}; distgnn registers "
                    f"{', '.join(names)} (edit workflow/schemas/config.schema.yaml)")
    pattern = next((b.get("pattern") for b in train.get("model", {}).get("anyOf", []) if "pattern" in b), None)
    if pattern != IMPORT_PATH.pattern:
        return (f"the config schema's train.model takes import paths matching {pattern!r}; distgnn "
                f"takes {IMPORT_PATH.pattern!r} (edit workflow/schemas/config.schema.yaml)")
    return None


def registry_mismatch_in(schema_path: str | os.PathLike) -> str | None:
    """:func:`registry_mismatch` of the schema file at ``schema_path``."""
    with open(schema_path) as f:
        return registry_mismatch(yaml.safe_load(f))


def unknown_model(config: dict[str, Any]) -> str | None:
    """One line when ``train.model`` is neither a built-in model nor a class's import path
    (``package.module:Class``), or None; the class itself is imported by the train job."""
    from distgnn.models.registry import BUILT_IN, is_import_path

    model = (config.get("train") or {}).get("model")
    if model is None or (isinstance(model, str) and (model in BUILT_IN or is_import_path(model))):
        return None
    return (f"train.model {model!r}: expected one of {', '.join(BUILT_IN)} or a model class's import "
            f"path package.module:Class (docs/design.md#own-model)")


def unknown_dataset(config: dict[str, Any]) -> str | None:
    """One line naming the first ``datasets[i].dataset`` that ``distgnn fetch`` does not know
    (distgnn.data.catalog), with the nearest name, or None: a dry run refuses a misspelt dataset
    that the schema (any string) lets through and that would fail only inside the fetch job."""
    from distgnn.data.catalog import DATASETS

    for i, entry in enumerate(config.get("datasets") or []):
        name = entry.get("dataset") if isinstance(entry, dict) else None
        if isinstance(name, str) and name not in DATASETS:
            nearest = difflib.get_close_matches(name, DATASETS, n=1)
            hint = f"did you mean '{nearest[0]}'?" if nearest else f"known: {', '.join(DATASETS)}"
            return f"unknown dataset '{name}' in 'datasets[{i}]' ({hint})"
    return None
