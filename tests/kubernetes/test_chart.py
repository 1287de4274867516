"""The Helm chart (charts/fuse): lints with Helm's own SDK, renders for the defaults and every
ci/*values.yaml, and every rendered object is valid for Kubernetes 1.33; then what the chart
promises: the job's secret only in a Secret, slots that follow GPUs, the elastic and ssh
layouts."""

from __future__ import annotations

import pytest
import yaml

from kubernetes_chart_util import CHART, find, render, secret_data, validate, values_files

CASES = [None] + values_files()


def load(path):
    return yaml.safe_load(path.read_text()) if path else {}


def containers(objects):
    for o in objects:
        if o["kind"] in ("StatefulSet", "Job"):
            yield o, o["spec"]["template"]["spec"]["containers"][0]


def test_the_chart_lints():
    import helm_python
    report = helm_python.lint(str(CHART))
    assert report["errors"] == [], report
    assert not [m for m in report["messages"] if m["severity"] > 1], report


@pytest.mark.parametrize("values", CASES, ids=lambda p: p.name if p else "defaults")
def test_every_object_renders_and_validates(values):
    objects = render(load(values))
    kinds = sorted(o["kind"] for o in objects)
    assert {"StatefulSet", "Job", "Service"} <= set(kinds), kinds
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize("values", CASES, ids=lambda p: p.name if p else "defaults")
def test_the_job_secret_is_a_secret_never_a_value(values):
    vals = load(values)
    objects = render(vals)
    for owner, c in containers(objects):
        [var] = [e for e in c["env"] if e["name"] == "FUSE_SECRET_KEY"]
        assert "value" not in var, f"{owner['metadata']['name']} has the secret as a value"
        ref = var["valueFrom"]["secretKeyRef"]
        existing = (vals.get("jobSecret") or {}).get("existingSecret")
        if existing:
            assert ref["name"] == existing and not find(objects, "Secret", existing)
        else:
            [secret] = find(objects, "Secret", ref["name"])
            key = secret_data(secret)[ref["key"]].decode()
            assert len(key) == 64 and int(key, 16) >= 0    # hex: what the store expects


def test_a_generated_secret_differs_between_installs():
    def key():
        [s] = [o for o in render() if o["kind"] == "Secret"]
        return secret_data(s)["secret-key"]
    assert key() != key()


def test_slots_follow_the_gpus_and_the_driver_counts_them():
    objects = render(load(CHART / "ci" / "gpu-values.yaml"))
    [sts] = find(objects, "StatefulSet")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {"name": "FUSE_AGENT_SLOTS", "value": "2"} in c["env"]
    assert sts["spec"]["template"]["spec"]["nodeSelector"] == {"accelerator": "nvidia"}
    [job] = find(objects, "Job")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("-np") + 1] == "4"       # 2 pods x 2 GPUs


def test_elastic_values_become_the_drivers_flags():
    objects = render(load(CHART / "ci" / "elastic-values.yaml"))
    [job] = find(objects, "Job")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = dict(zip(args[1::1], args[2::1]))
    assert (flags["-np"], flags["--min-np"], flags["--max-np"]) == ("4", "2", "6")
    assert flags["--reset-limit"] == "5" and args[0] == "fuserun" and "--agents" in args
    [svc] = [s for s in find(objects, "Service") if s["spec"].get("clusterIP") != "None"]
    assert svc["spec"]["ports"][0]["port"] == 29400
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "driver"


def test_ssh_mode_has_a_generated_key_and_a_hostfile():
    objects = render({"mode": "ssh", "workers": {"replicas": 3, "slots": 2}})
    [key] = [o for o in find(objects, "Secret") if o["metadata"]["name"].endswith("-ssh")]
    assert secret_data(key)["id_rsa"].startswith(b"-----BEGIN EC PRIVATE KEY-----")
    [cm] = find(objects, "ConfigMap")
    assert cm["data"]["hostfile"].split("\n")[:3] == [
        f"job-worker-{i}.job-workers slots=2" for i in range(3)]
    assert "fuserun -np 6 --hostfile" in cm["data"]["driver.sh"]


@pytest.mark.parametrize("values, message", [
    ({"mode": "ssh", "elastic": {"enabled": True}}, "elastic.enabled needs mode: agent"),
    ({"mode": "mpi"}, 'mode must be agent or ssh, not "mpi"')])
def test_bad_values_fail_with_the_reason(values, message):
    import helm_python
    with pytest.raises(helm_python.HelmError, match=message):
        render(values)
