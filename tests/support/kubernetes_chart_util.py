"""The chart as Kubernetes would get it: rendered by Helm's own Go SDK (helm-python-sdk, no helm
binary), every object validated against the Kubernetes schemas (kubernetes-validate)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "fuse"
KUBERNETES = "1.33"
RELEASE = "job"


def values_files() -> list[Path]:
    return sorted((CHART / "ci").glob("*values.yaml"))


def render(values: dict | None = None, name: str = RELEASE) -> list[dict]:
    """The objects ``helm install name`` would create with ``values``."""
    import helm_python
    out = helm_python.Chart.load(str(CHART)).render(values or {}, name=name,
                                                    namespace="default", is_install=True)
    objects = []
    for template, text in sorted(out.items()):
        for obj in yaml.safe_load_all(text):
            if obj:
                obj.setdefault("metadata", {}).setdefault("annotations", {})
                obj["metadata"]["annotations"]["fuse.test/template"] = template
                objects.append(obj)
    return objects


def validate(obj: dict) -> None:
    import kubernetes_validate
    clean = dict(obj, metadata={k: v for k, v in obj["metadata"].items()
                                if k != "annotations"} | (
        {"annotations": {k: v for k, v in obj["metadata"]["annotations"].items()
                         if not k.startswith("fuse.test/")}}
        if len(obj["metadata"].get("annotations", {})) > 1 else {}))
    kubernetes_validate.validate(clean, KUBERNETES, strict=True)


def find(objects: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind
            and (name is None or o["metadata"]["name"] == name)]


def secret_data(secret: dict) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
