"""The plugin registry, as users meet it: load_backend, describe_backends, python -m fuse.info.

Anything that changes the set of installed plugins runs in a fresh interpreter: stevedore caches
entry points per process.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from fuse._build_info import DISTRIBUTION
from fuse.backends import backend_names, describe_backends, load_backend
from fuse.backends._registry import check_plugin
from fuse.backends.base import Backend
from fuse.exceptions import BackendUnavailable, FrameworkUnavailable
from fuse.frameworks import describe_frameworks, framework_names, load_framework
from fuse.frameworks.base import FrameworkAdapter
from paths_util import support

KV_SOURCE = Path(support("fuse_kvbackend"))

pytestmark = pytest.mark.timeout(300)


def run_python(args, env_extra=None, timeout=120, cwd=None):
    env = dict(os.environ)
    env.pop("FUSE_BACKEND", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def run_code(code, env_extra=None, timeout=120):
    proc = run_python(["-c", textwrap.dedent(code)], env_extra, timeout)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


# -- in-process: the built-ins ------------------------------------------------------------------

def test_gloo_loads_or_says_why():
    try:
        cls = load_backend("gloo")
    except BackendUnavailable as err:
        text = str(err)
        assert "'gloo'" in text and "fuse.backends.gloo:GlooBackend" in text, text
    else:
        assert issubclass(cls, Backend)
        assert cls.api_version == Backend.api_version


def test_unknown_backend_lists_installed_names():
    names = backend_names()
    assert "gloo" in names
    with pytest.raises(BackendUnavailable) as info:
        load_backend("no-such-backend")
    text = str(info.value)
    assert "'no-such-backend'" in text
    for name in names:
        assert name in text
    assert info.value.__cause__ is not None  # chained to stevedore's NoMatches


def test_numpy_framework_adapter():
    assert "numpy" in framework_names()
    cls = load_framework("numpy")
    assert issubclass(cls, FrameworkAdapter) and cls.name == "numpy"
    assert cls.is_available() == (True, "")
    assert cls.version() == metadata.version("numpy")
    (row,) = [r for r in describe_frameworks() if r.name == "numpy"]
    assert row.loads and row.version == metadata.version("numpy") and row.distribution == DISTRIBUTION == "fuse-dl"
    with pytest.raises(FrameworkUnavailable, match="installed: .*numpy"):
        load_framework("no-such-framework")


def test_describe_backends_covers_gloo():
    (row,) = [r for r in describe_backends() if r.name == "gloo"]
    assert row.target == "fuse.backends.gloo:GlooBackend"
    assert row.loads or row.reason
    assert row.distribution == DISTRIBUTION == "fuse-dl"


def test_check_plugin_contract():
    class Good(Backend):
        pass

    class Old(Backend):
        api_version = 0

    class Missing(Backend):
        @classmethod
        def is_available(cls):
            return False, "libfoo.so.1 not found"

    class Bare(Backend):
        @classmethod
        def is_available(cls):
            return False

    class Raises(Backend):
        @classmethod
        def is_available(cls):
            raise OSError("no device")

    assert check_plugin(Good, Backend) == ("", None)
    assert "API version 0" in check_plugin(Old, Backend)[0]
    assert check_plugin(Missing, Backend)[0] == "libfoo.so.1 not found"
    assert check_plugin(Bare, Backend)[0] == "is_available() returned False"
    assert check_plugin(Raises, Backend)[0] == "is_available() raised OSError: no device"
    assert "not a subclass" in check_plugin(object, Backend)[0]
    assert "not a subclass" in check_plugin(len, Backend)[0]


# -- broken plugins, found through real package metadata on sys.path -----------------------------

BROKEN_MODULE = 'raise ImportError("libfoo.so.1: cannot open shared object file")\n'
ODD_MODULE = '''
from fuse.backends.base import Backend
from fuse.frameworks.base import FrameworkAdapter

class NotABackend:
    pass

class OldAPI(Backend):
    api_version = 0

class NoDevice(Backend):
    @classmethod
    def is_available(cls):
        return False, "no GPU visible"

class GhostAdapter(FrameworkAdapter):
    name = "ghost"

    @classmethod
    def is_available(cls):
        return False, "ghost is not installed"
'''
ENTRY_POINTS = """\
[fuse.backends]
gloo = fuse_odd_plugins:OldAPI
broken_import = fuse_broken_plugins:Missing
not_a_backend = fuse_odd_plugins:NotABackend
old_api = fuse_odd_plugins:OldAPI
no_device = fuse_odd_plugins:NoDevice

[fuse.frameworks]
ghost = fuse_odd_plugins:GhostAdapter
"""


@pytest.fixture
def broken_site(tmp_path):
    """A directory holding an installed distribution (dist-info) that registers bad plugins."""
    site = tmp_path / "site"
    info = site / "fuse_bad_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fuse-bad-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    (site / "fuse_broken_plugins.py").write_text(BROKEN_MODULE)
    (site / "fuse_odd_plugins.py").write_text(ODD_MODULE)
    path = os.pathsep.join(p for p in [str(site), os.environ.get("PYTHONPATH", "")] if p)
    return {"PYTHONPATH": path}


def test_broken_plugins_are_named_with_their_reason(broken_site):
    out = run_code("""
        import json
        from fuse.backends import load_backend, describe_backends, backend_names
        from fuse.frameworks import load_framework, describe_frameworks
        from fuse.exceptions import BackendUnavailable, FrameworkUnavailable
        result = {"names": backend_names(), "errors": {}}
        for name in ["broken_import", "not_a_backend", "old_api", "no_device", "gloo"]:
            try:
                load_backend(name)
            except BackendUnavailable as err:
                result["errors"][name] = [str(err), repr(err.__cause__)]
        try:
            load_framework("ghost")
        except FrameworkUnavailable as err:
            result["errors"]["ghost"] = [str(err), repr(err.__cause__)]
        result["backends"] = [r.as_dict() for r in describe_backends()]
        result["frameworks"] = [r.as_dict() for r in describe_frameworks()]
        print(json.dumps(result))
    """, broken_site)
    result = json.loads(out)
    errors = result["errors"]
    assert {"broken_import", "not_a_backend", "old_api", "no_device", "gloo"} <= set(
        result["names"])

    text, cause = errors["broken_import"]
    assert "'broken_import'" in text and "fuse_broken_plugins:Missing" in text
    assert "libfoo.so.1: cannot open shared object file" in text
    assert cause.startswith("ImportError(")  # raised ``from`` the import error

    assert "fuse_odd_plugins:NotABackend" in errors["not_a_backend"][0]
    assert "not a subclass of fuse.backends.base.Backend" in errors["not_a_backend"][0]
    assert "API version 0" in errors["old_api"][0]
    assert "no GPU visible" in errors["no_device"][0]
    assert "ghost is not installed" in errors["ghost"][0]
    assert "fuse_odd_plugins:GhostAdapter" in errors["ghost"][0]

    rows = {r["name"]: r for r in result["backends"]}
    assert rows["broken_import"]["loads"] is False
    assert "libfoo.so.1" in rows["broken_import"]["reason"]
    assert rows["broken_import"]["distribution"] == "fuse-bad-plugins"
    assert rows["no_device"]["reason"] == "no GPU visible"
    assert rows["old_api"]["loads"] is False and rows["not_a_backend"]["loads"] is False
    dup = [r for r in result["backends"] if r["name"] == "gloo"]
    assert len(dup) == 2 and not any(r["loads"] for r in dup)
    assert all("registered 2 times" in r["reason"] for r in dup)
    assert "several installed packages register a backend named 'gloo'" in errors["gloo"][0]
    frameworks = {r["name"]: r for r in result["frameworks"]}
    assert frameworks["ghost"]["loads"] is False and frameworks["numpy"]["loads"] is True


def test_info_lists_broken_plugins_and_exits_0(broken_site):
    proc = run_python(["-m", "fuse.info"], broken_site)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (line,) = [l for l in lines if l.strip().startswith("broken_import ")]
    assert "unavailable: import failed: ImportError: libfoo.so.1" in line
    (line,) = [l for l in lines if l.strip().startswith("no_device ")]
    assert "unavailable: no GPU visible" in line
    assert proc.stderr == ""  # failures are reported in the table, not logged


# -- python -m fuse.info ------------------------------------------------------------------------

def test_info_text_and_json():
    env = {"FUSE_CYCLE_TIME": "2.5", "HOROVOD_FUSION_THRESHOLD": "1048576",
           "HOROVOD_CYCLE_TIME": "7", "FUSE_NOT_A_KNOB": "1"}
    proc = run_python(["-m", "fuse.info"], env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("fuse ")
    assert f"python   {sys.version.split()[0]}" in out
    assert f"numpy    {metadata.version('numpy')}" in out
    assert "fuse.backends.gloo:GlooBackend" in out
    (gloo,) = [l for l in out.splitlines() if l.strip().startswith("gloo ")]
    assert " available" in gloo or "unavailable: " in gloo
    assert "(selected)" in gloo  # FUSE_BACKEND defaults to gloo
    (numpy_line,) = [l for l in out.splitlines() if l.strip().startswith("numpy ")
                     and "NumpyAdapter" in l]
    assert "available" in numpy_line and metadata.version("numpy") in numpy_line
    for fw in ("torch", "tensorflow", "mxnet"):
        assert any(l.strip().startswith(fw + " ") for l in out.splitlines()), fw
    assert "FUSE_CYCLE_TIME=2.5" in out
    assert "HOROVOD_FUSION_THRESHOLD=1048576" in out
    assert "HOROVOD_CYCLE_TIME=7  (ignored: FUSE_CYCLE_TIME is set)" in out
    assert "FUSE_NOT_A_KNOB=1  (not a fuse.config knob)" in out

    proc = run_python(["-m", "fuse.info", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["numpy"] == metadata.version("numpy")
    assert data["python"]["version"] == sys.version.split()[0]
    assert "gloo" in {r["name"] for r in data["backends"]}
    assert {r["name"]: r["loads"] for r in data["frameworks"]}["numpy"] is True
    assert set(data["installed_frameworks"]) == {"torch", "tensorflow", "mxnet"}
    for fw, info in data["installed_frameworks"].items():
        try:
            version = metadata.version(fw)
        except metadata.PackageNotFoundError:
            version = None
        if version is not None:
            assert info["version"] == version
    assert data["environment"]["knobs"] == {"FUSE_CYCLE_TIME": "2.5",
                                            "HOROVOD_FUSION_THRESHOLD": "1048576"}


def test_info_does_not_import_frameworks():
    out = run_code("""
        import sys
        import fuse.info
        fuse.info.collect()
        print(sorted(m for m in ("torch", "tensorflow", "mxnet", "ray", "pyspark")
                     if m in sys.modules))
    """)
    assert out.strip() == "[]"


def test_info_reports_bad_knob_and_exits_0():
    proc = run_python(["-m", "fuse.info"], {"FUSE_CYCLE_TIME": "soon"})
    assert proc.returncode == 0, proc.stderr
    assert "error: environment variable FUSE_CYCLE_TIME='soon'" in proc.stdout


def test_python_dash_m_fuse_is_the_report():
    proc = run_python(["-m", "fuse", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert "backends" in json.loads(proc.stdout)


def test_main_ignores_the_callers_command_line(monkeypatch, capsys):
    """fuserun --check-build calls main() while sys.argv is fuserun's own."""
    from fuse import info

    monkeypatch.setattr(sys, "argv", ["fuserun", "--check-build"])
    assert info.main() == 0
    out = capsys.readouterr().out
    assert out.startswith("fuse ") and "backends (entry point group fuse.backends" in out
    assert info.main(["--json"]) == 0
    assert "numpy" in json.loads(capsys.readouterr().out)


def test_import_fuse_loads_no_plugin():
    out = run_code("""
        import sys
        import fuse, fuse.backends, fuse.frameworks
        plugins = {"fuse.backends.gloo", "fuse.frameworks.numpy", "fuse_kvbackend"}
        print(sorted(m for m in sys.modules if m.split(".gloo.")[0] in plugins))
    """)
    assert out.strip() == "[]"


# -- a third-party backend installed with pip ---------------------------------------------------

def _version_tuple(text):
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _ensure_setuptools():
    """pip install --no-build-isolation builds with the venv's own setuptools (which before 70.1
    also needs the wheel package)."""
    try:
        version = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        version = None
    has_wheel = importlib.util.find_spec("wheel") is not None
    if version is None or (_version_tuple(version) < (70, 1) and not has_wheel):
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "setuptools>=70.1"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"could not install setuptools:\n{proc.stderr}"


@pytest.fixture(scope="module")
def kv_installed(tmp_path_factory):
    """pip-install tests/support/fuse_kvbackend into this venv (from a copy, so the build
    leaves nothing in the source tree); uninstall afterwards unless it was there before."""
    try:
        metadata.version("fuse-kvbackend")
        was_installed = True
    except metadata.PackageNotFoundError:
        was_installed = False
    _ensure_setuptools()
    src = tmp_path_factory.mktemp("kv") / "fuse_kvbackend"
    shutil.copytree(KV_SOURCE, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                           "--no-deps", str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
    yield src
    if not was_installed:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "fuse-kvbackend"],
                       capture_output=True, timeout=300)


def test_installed_kv_backend_loads(kv_installed, tmp_path):
    out = run_code("""
        import json
        from fuse.backends import load_backend, describe_backends, backend_names
        from fuse.backends.base import Backend
        cls = load_backend("kv")
        rows = {r.name: r.as_dict() for r in describe_backends()}
        print(json.dumps({"cls": f"{cls.__module__}:{cls.__qualname__}",
                          "file": __import__(cls.__module__).__file__,
                          "subclass": issubclass(cls, Backend),
                          "names": backend_names(), "kv": rows["kv"]}))
    """)
    data = json.loads(out)
    assert data["cls"] == "fuse_kvbackend:KVBackend" and data["subclass"]
    assert str(KV_SOURCE) not in data["file"]  # the installed copy, not the source tree
    assert "kv" in data["names"] and "gloo" in data["names"]
    assert data["kv"] == {"name": "kv", "target": "fuse_kvbackend:KVBackend", "loads": True,
                          "reason": "", "distribution": "fuse-kvbackend",
                          "dist_version": "0.1.0", "version": "0.1.0"}

    proc = run_python(["-m", "fuse.info"], {"FUSE_BACKEND": "kv"})
    assert proc.returncode == 0, proc.stderr
    (line,) = [l for l in proc.stdout.splitlines() if l.strip().startswith("kv ")]
    assert "available" in line and "unavailable" not in line
    assert "fuse-kvbackend 0.1.0" in line and "(selected)" in line
    assert "FUSE_BACKEND=kv" in proc.stdout


WORKER = """
import sys

import numpy as np
import fuse

fuse.init()
x = fuse.allreduce(np.arange(4.0) * (fuse.rank() + 1), op=fuse.Sum)
expected = np.arange(4.0) * sum(r + 1 for r in range(fuse.size()))
assert fuse.size() == 2, fuse.size()
assert np.array_equal(np.asarray(x), expected), (x, expected)
assert "fuse_kvbackend" in sys.modules, "the kv backend was not loaded"
print(f"kv-ok rank {fuse.rank()} {np.asarray(x).tolist()}", flush=True)
fuse.shutdown()
"""


def test_two_workers_on_kv_backend(kv_installed, tmp_path):
    """A real job: fuserun starts 2 workers whose engine moves data through the kv backend."""
    core = importlib.import_module("fuse._core")  # a broken build fails here, as it should
    assert hasattr(core, "Engine"), f"fuse._core ({core.__file__}) has no Engine: a broken build"
    fuserun = Path(sys.executable).with_name("fuserun")
    assert fuserun.exists(), f"fuserun is not installed next to {sys.executable}"
    script = tmp_path / "kv_job.py"
    script.write_text(WORKER)
    env = dict(os.environ, FUSE_BACKEND="kv", FUSE_GLOO_TIMEOUT_SECONDS="60")
    proc = subprocess.run([str(fuserun), "-np", "2", sys.executable, str(script)],
                          capture_output=True, text=True, env=env, timeout=240,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    for rank in (0, 1):
        assert f"kv-ok rank {rank} [0.0, 3.0, 6.0, 9.0]" in proc.stdout, proc.stdout


def test_info_says_why_an_integration_is_unavailable(monkeypatch):
    import fuse.info
    real = fuse.info.util.find_spec
    monkeypatch.setattr(fuse.info.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-jre")
    rows = fuse.info.integrations()
    assert not rows["fuse.ray"]["available"]
    assert rows["fuse.ray"]["reason"] == "ray is not installed (pip install fuse-dl[ray])"
    if rows["fuse.spark"]["version"] is not None:      # pyspark is here: Java is what lacks
        assert not rows["fuse.spark"]["available"]
        assert "JAVA_HOME=/nonexistent-jre has no bin/java" in rows["fuse.spark"]["reason"]
    text = fuse.info.render({**fuse.info.collect(), "integrations": rows})
    assert "fuse.ray    unavailable: ray is not installed (pip install fuse-dl[ray])" in text


def test_info_lists_the_integrations_that_run_here():
    import needs
    needs.module("ray")
    needs.module("pyspark", "spark")
    data = json.loads(run_python(["-m", "fuse.info", "--json"]).stdout)["integrations"]
    assert data["fuse.ray"]["available"], data
    assert data["fuse.spark"]["available"] and data["fuse.spark"]["java"], data
