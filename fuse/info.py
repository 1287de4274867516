"""What fuse finds in this environment: ``python -m fuse.info [--json]``.

Prints fuse's version, Python, numpy, whether the engine imports, every backend and framework
plugin with "available" or "unavailable: <reason>", which deep-learning frameworks are installed
(from package metadata, without importing them), whether the Ray and Spark integrations can run
(and why not), and the FUSE_/HOROVOD_ environment knobs in effect.  ``python -m fuse`` and
``fuserun --check-build`` print the same.  Always exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata, util
from typing import Any

# Frameworks fuse has adapters for: top-level module -> distributions that may provide it.
FRAMEWORKS = {
    "torch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel",
                   "tensorflow-macos", "tf-nightly", "tf-nightly-cpu"),
    "mxnet": ("mxnet", "mxnet-mkl", "mxnet-native"),
}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def build() -> dict[str, Any]:
    """What this build of fuse carries: its distribution and version, the Gloo it was compiled
    against (and where that came from), its build options, and the shared libraries a binary
    wheel bundles (auditwheel puts them in ``fuse_dl.libs`` beside the package)."""
    import fuse
    from fuse._build_info import (BUILD_OPTIONS, DISTRIBUTION, GLOO_ORIGIN, GLOO_VERSION,
                                  VERSION)

    libs_dir = os.path.join(os.path.dirname(os.path.dirname(fuse.__file__)),
                            DISTRIBUTION.replace("-", "_") + ".libs")
    bundled = sorted(os.listdir(libs_dir)) if os.path.isdir(libs_dir) else []
    return {"distribution": DISTRIBUTION, "version": VERSION,
            "gloo": {"version": GLOO_VERSION, "origin": GLOO_ORIGIN},
            "options": dict(BUILD_OPTIONS), "bundled_libraries": bundled}


def _engine() -> dict[str, Any]:
    try:
        from fuse import _core
    except Exception as err:  # a broken build is exactly what this report is for
        return {"importable": False, "reason": f"{type(err).__name__}: {err}"}
    return {"importable": True, "reason": "", "file": getattr(_core, "__file__", None)}


def installed_frameworks() -> dict[str, dict[str, Any]]:
    """For torch, tensorflow and mxnet: whether the module is on the path and its package version.

    Uses ``importlib.util.find_spec`` and package metadata only; never imports a framework."""
    out: dict[str, dict[str, Any]] = {}
    by_module = None
    for module, dists in FRAMEWORKS.items():
        try:
            found = util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        dist = version = None
        if found:
            for candidate in dists:
                version = _version(candidate)
                if version is not None:
                    dist = candidate
                    break
            if version is None:  # an unusual distribution name: ask the metadata index
                if by_module is None:
                    by_module = metadata.packages_distributions()
                for candidate in by_module.get(module, []):
                    version = _version(candidate)
                    if version is not None:
                        dist = candidate
                        break
        out[module] = {"installed": found, "distribution": dist, "version": version}
    return out


def _java() -> tuple[str | None, str]:
    """(the java executable Spark would start, its version line) or (None, why there is none).
    PySpark runs $JAVA_HOME/bin/java when JAVA_HOME is set, else java from PATH."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        return None, (f"JAVA_HOME={home} has no bin/java" if home else
                      "no Java runtime: java is not on PATH and JAVA_HOME is unset (install a "
                      "Java 17+ runtime, e.g. Debian's default-jre-headless)")
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{java} does not run: {err}"
    first = (proc.stderr or proc.stdout).strip().splitlines()
    return java, first[0] if first else "version unknown"


def integrations() -> dict[str, dict[str, Any]]:
    """fuse.ray, fuse.spark and fuse.lightning: whether each can run here, from what is
    installed (Ray; PySpark and a Java runtime; Lightning), and the reason when it cannot.
    Imports none of them."""
    out: dict[str, dict[str, Any]] = {}
    for name, module, dist, extra in (("fuse.ray", "ray", "ray", "ray"),
                                      ("fuse.spark", "pyspark", "pyspark", "spark"),
                                      ("fuse.lightning", "lightning", "lightning", "lightning")):
        version = _version(dist) if util.find_spec(module) is not None else None
        row: dict[str, Any] = {"available": version is not None, "package": dist,
                               "version": version,
                               "reason": "" if version else
                               f"{module} is not installed (pip install fuse-dl[{extra}])"}
        if name == "fuse.spark" and version is not None:
            java, detail = _java()
            row["java"] = detail if java else None
            if java is None:
                row["available"], row["reason"] = False, detail
        out[name] = row
    return out


def environment() -> dict[str, Any]:
    """The knobs set in the environment, as ``fuse.config.Config`` reads them."""
    from fuse.config import Config

    known: dict[str, str] = {}
    for fuse_name, horovod_name, _default, _doc in Config.describe():
        known[fuse_name] = fuse_name
        if horovod_name:
            known[horovod_name] = fuse_name
    result: dict[str, Any] = {"knobs": {}, "shadowed": {}, "other": {}, "error": None,
                              "backend": Config.backend, "gpu_backend": Config.gpu_backend}
    try:
        cfg = Config.from_env()
    except ValueError as err:
        result["error"] = str(err)
        cfg = None
    if cfg is not None:
        result["backend"] = cfg.backend
        result["gpu_backend"] = cfg.gpu_backend
        used = {var for var in cfg.explicit.values() if var in os.environ}
        result["knobs"] = {var: os.environ[var] for var in sorted(used)}
    else:  # show what is set, unparsed, next to the error
        used = {var for var in os.environ if var in known}
        result["knobs"] = {var: os.environ[var] for var in sorted(used)}
    for var in sorted(os.environ):
        if not var.startswith(("FUSE_", "HOROVOD_")) or var in used:
            continue
        if var in known and cfg is not None:
            result["shadowed"][var] = known[var]
        elif var not in known:
            result["other"][var] = os.environ[var]
    return result


def collect() -> dict[str, Any]:
    """Everything the report shows, as plain data (what ``--json`` prints)."""
    from fuse.backends import describe_backends, describe_device_backends
    from fuse.frameworks import describe_frameworks

    return {
        "fuse": build()["version"],
        "build": build(),
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "implementation": platform.python_implementation()},
        "platform": platform.platform(),
        "numpy": _version("numpy"),
        "engine": _engine(),
        "backends": [p.as_dict() for p in describe_backends()],
        "device_backends": [p.as_dict() for p in describe_device_backends()],
        "frameworks": [p.as_dict() for p in describe_frameworks()],
        "installed_frameworks": installed_frameworks(),
        "integrations": integrations(),
        "environment": environment(),
    }


def _plugin_lines(rows: list[dict[str, Any]], selected=()) -> list[str]:
    from fuse._build_info import DISTRIBUTION as own_distribution

    if not rows:
        return ["  (none registered)"]
    width = max(len(r["name"]) for r in rows)
    lines = []
    for r in rows:
        state = "available" if r["loads"] else f"unavailable: {r['reason']}"
        extra = []
        if r["version"]:
            extra.append(f"version {r['version']}")
        if r["distribution"] and r["distribution"] != own_distribution:
            extra.append(f"from {r['distribution']} {r['dist_version'] or ''}".rstrip())
        # only a plugin that can run here is what the job will use
        mark = " (selected)" if r["name"] in selected and r["loads"] else ""
        tail = f" [{', '.join(extra)}]" if extra else ""
        lines.append(f"  {r['name']:<{width}}  {state}{tail}{mark}    -> {r['target']}")
    return lines


def _cuda_line(rows: list[dict[str, Any]], gpu_backend: str) -> str:
    """Where CUDA tensors are reduced, and why not on the device when they are not."""
    row = next((r for r in rows if r["name"] == gpu_backend), None)
    if row is None:
        why = f"FUSE_GPU_BACKEND={gpu_backend!r} is not installed"
    elif row["loads"]:
        return f"CUDA tensors: reduced on the device by {gpu_backend}"
    else:
        why = f"{gpu_backend}: {row['reason']}"
    return f"CUDA tensors: staged through host memory ({why})"


def render(data: dict[str, Any]) -> str:
    env = data["environment"]
    py = data["python"]
    eng = data["engine"]
    lines = [
        f"fuse {data['fuse']} ({data['build']['distribution']})",
        "  Gloo     " + (f"{data['build']['gloo']['version']}"
                         f"{' from ' + data['build']['gloo']['origin'] if data['build']['gloo']['origin'] else ''}"
                         if data['build']['gloo']['version'] else "not built in"),
        "  build    " + ", ".join(f"{k} {v}" for k, v in data["build"]["options"].items()),
        "  bundled  " + (", ".join(data["build"]["bundled_libraries"]) or
                         "nothing (linked against this system's libraries)"),
        f"  python   {py['version']} ({py['implementation']}, {py['executable']})",
        f"  platform {data['platform']}",
        f"  numpy    {data['numpy'] or 'not installed'}",
        "  engine   " + ("built" if eng["importable"] else f"not importable: {eng['reason']}"),
        "",
        "backends (entry point group fuse.backends, chosen by FUSE_BACKEND):",
        *_plugin_lines(data["backends"], (env["backend"],)),
    ]
    names = {r["name"] for r in data["backends"]}
    if env["backend"] and env["backend"] not in names:
        lines.append(f"  warning: FUSE_BACKEND={env['backend']!r} is not installed")
    lines += ["", "GPU backends (entry point group fuse.device_backends, chosen by "
              "FUSE_GPU_BACKEND):",
              *_plugin_lines(data["device_backends"], (env["gpu_backend"],)),
              "  " + _cuda_line(data["device_backends"], env["gpu_backend"])]
    lines += ["", "framework adapters (entry point group fuse.frameworks):",
              *_plugin_lines(data["frameworks"]), "", "frameworks installed here:"]
    for module, info in data["installed_frameworks"].items():
        if not info["installed"]:
            state = "not installed"
        elif info["version"]:
            dist = "" if info["distribution"] == module else f" ({info['distribution']})"
            state = f"{info['version']}{dist}"
        else:
            state = "installed (version unknown)"
        lines.append(f"  {module:<10}  {state}")
    lines += ["", "cluster integrations:"]
    for name, info in data["integrations"].items():
        if info["available"]:
            java = f", {info['java']}" if info.get("java") else ""
            lines.append(f"  {name:<10}  available [{info['package']} {info['version']}{java}]")
        else:
            lines.append(f"  {name:<10}  unavailable: {info['reason']}")
    lines += ["", "environment:"]
    if env["error"]:
        lines.append(f"  error: {env['error']}")
    for var, value in env["knobs"].items():
        lines.append(f"  {var}={value}")
    for var, winner in env["shadowed"].items():
        lines.append(f"  {var}={os.environ.get(var, '')}  (ignored: {winner} is set)")
    for var, value in env["other"].items():
        lines.append(f"  {var}={value}  (not a fuse.config knob)")
    if not (env["error"] or env["knobs"] or env["shadowed"] or env["other"]):
        lines.append("  no FUSE_ or HOROVOD_ variables set (all defaults)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the report; returns 0.  ``argv`` holds this report's own options (``["--json"]``);
    None means none, so a caller with its own command line (``fuserun --check-build`` calls
    ``main()``) gets the text report.  ``python -m fuse.info`` passes ``sys.argv[1:]``."""
    parser = argparse.ArgumentParser(prog="python -m fuse.info",
                                     description="Show what fuse finds in this environment.")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args([] if argv is None else argv)
    data = collect()
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
