"""The inventory's `gpu_models:` section, checked (burnin/inventory/schema.py calls
`gpu_models` with its checker): the built-in reference models, with a site's added or
overriding; and a `gpu_model:` key of the defaults or a node checked against them. Every
error names the line and key, as the rest of the schema's."""

from __future__ import annotations

from burnin.model.gpu_reference import FLAG_FIELDS, GPU_MODELS, NUMERIC_FIELDS, model_from

MODEL_KEYS = {"nvml_names": "str_list", **{k: "positive" for k in NUMERIC_FIELDS},
              **{k: "bool" for k in FLAG_FIELDS}}


def gpu_models(c, doc, top: dict) -> dict:
    """The built-in models, with the inventory `doc`'s `gpu_models:` (in its checked
    top-level `top`) added or overriding; `c`'s errors added for what is wrong."""
    models = dict(GPU_MODELS)
    if "gpu_models" not in top or not c.mapping(top["gpu_models"], "gpu_models",
                                                  doc.key_lines["gpu_models"]):
        return models
    for key, body in top["gpu_models"].items():
        where, line = f"gpu_models.{key}", top["gpu_models"].key_lines[key]
        if not c.mapping(body, where, line):
            continue
        values = c.keys(body, MODEL_KEYS, where)
        base = models.get(key)
        if base is None and not values.get("nvml_names"):
            c.error(line, f"{where}.nvml_names", "missing; a new model needs the names NVML "
                                                 "reports for it")
            continue
        merged = {**(base.__dict__ if base else {}), **values}
        models[str(key)] = model_from(str(key), merged)
    return models


def known_model(c, entry, values: dict, where: str, models: dict) -> None:
    """A `gpu_model:` among the checked `values` of `entry` that names none of `models`:
    an error, and the key left out."""
    model = values.get("gpu_model")
    if model is not None and model not in models:
        c.error(entry.key_lines["gpu_model"], f"{where}.gpu_model",
                f"unknown model {model!r}; expected one of: {', '.join(models)}, or a model "
                "added under gpu_models:")
        del values["gpu_model"]
