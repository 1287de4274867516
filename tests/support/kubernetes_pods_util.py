"""Run the chart's rendered pods as podman containers: no cluster here, so this plays the part of
the kubelet for what fuse depends on, taking everything from the rendered manifests:

* a StatefulSet's pod ``i`` is a container ``<name>-<i>`` with that hostname, reachable as
  ``<name>-<i>.<serviceName>`` (the headless Service's DNS); a Job's pod is ``<name>-0``;
* a (non-headless) Service's name resolves to the pods its selector picks (a network alias);
* the container's image, args (and command, if set), env (values, and ``secretKeyRef`` /
  ``configMapKeyRef`` read from the rendered Secret and ConfigMap), and its volumes: Secret and
  ConfigMap volumes are written to files with their modes and mounted read-only, emptyDir is a
  tmpfs, hostPath a bind mount.

Resources, probes and scheduling fields are not played: podman cannot give GPUs here.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from kubernetes_chart_util import secret_data

PODMAN = ["podman"]
RUN = ["--runtime", "runc"]


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


class Cluster:
    """The rendered objects of one release, and the containers started from them."""

    def __init__(self, objects: list[dict], workdir: Path):
        self.objects = objects
        self.workdir = workdir
        self.network = f"fuse-k8s-{uuid.uuid4().hex[:8]}"
        self.containers: list[str] = []
        self.secrets = {o["metadata"]["name"]: secret_data(o)
                        for o in objects if o["kind"] == "Secret"}
        self.configmaps = {o["metadata"]["name"]: {k: v.encode() for k, v in
                                                    (o.get("data") or {}).items()}
                           for o in objects if o["kind"] == "ConfigMap"}
        podman("network", "create", self.network)

    def close(self) -> None:
        for name in self.containers:
            podman("rm", "-f", "-t", "0", name, check=False)
        podman("network", "rm", "-f", self.network, check=False)

    # -- what the manifests say ---------------------------------------------------------------
    def workload(self, kind: str) -> dict:
        [obj] = [o for o in self.objects if o["kind"] == kind]
        return obj

    def _aliases(self, labels: dict) -> list[str]:
        """The names of the Services whose selector picks a pod with ``labels``."""
        out = []
        for svc in self.objects:
            if svc["kind"] != "Service" or svc["spec"].get("clusterIP") == "None":
                continue
            selector = svc["spec"].get("selector") or {}
            if selector and all(labels.get(k) == v for k, v in selector.items()):
                out.append(svc["metadata"]["name"])
        return out

    def _env(self, container: dict) -> list[str]:
        args = []
        for var in container.get("env") or []:
            if "value" in var:
                value = str(var["value"])
            else:
                ref = var["valueFrom"]
                if "secretKeyRef" in ref:
                    r = ref["secretKeyRef"]
                    value = self.secrets[r["name"]][r["key"]].decode()
                else:
                    r = ref["configMapKeyRef"]
                    value = self.configmaps[r["name"]][r["key"]].decode()
            args += ["-e", f"{var['name']}={value}"]
        return args

    def _volumes(self, pod: str, spec: dict, container: dict) -> list[str]:
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        args = []
        for mount in container.get("volumeMounts") or []:
            vol = volumes[mount["name"]]
            target = mount["mountPath"]
            if "secret" in vol or "configMap" in vol:
                if "secret" in vol:
                    files = self.secrets[vol["secret"]["secretName"]]
                    mode = vol["secret"].get("defaultMode", 0o644)
                else:
                    files = self.configmaps[vol["configMap"]["name"]]
                    mode = vol["configMap"].get("defaultMode", 0o644)
                d = self.workdir / "volumes" / pod / mount["name"]
                d.mkdir(parents=True, exist_ok=True)
                for key, data in files.items():
                    (d / key).write_bytes(data)
                    os.chmod(d / key, mode)
                args += ["-v", f"{d}:{target}:ro"]
            elif "emptyDir" in vol:
                args += ["--tmpfs", target]
            elif "hostPath" in vol:
                args += ["-v", f"{vol['hostPath']['path']}:{target}"]
            else:
                raise NotImplementedError(f"volume {mount['name']}: {sorted(vol)}")
        return args

    # -- starting pods -----------------------------------------------------------------------
    def start(self, kind: str, index: int = 0) -> str:
        """Start pod ``index`` of the StatefulSet or the Job; returns its container's name."""
        obj = self.workload(kind)
        template = obj["spec"]["template"]
        spec = template["spec"]
        [container] = spec["containers"]
        pod = f"{obj['metadata']['name']}-{index}"
        argv = ["run", "-d", *RUN, "--name", pod, "--hostname", pod,
                "--network", self.network]
        aliases = self._aliases(template["metadata"].get("labels") or {})
        if kind == "StatefulSet":
            aliases.append(f"{pod}.{obj['spec']['serviceName']}")
        for alias in aliases:
            argv += ["--network-alias", alias]
        argv += self._env(container) + self._volumes(pod, spec, container)
        if container.get("command"):
            argv += ["--entrypoint", container["command"][0]]
            rest = container["command"][1:] + container.get("args", [])
        else:
            rest = container.get("args", [])
        argv += [container["image"], *rest]
        podman(*argv)
        self.containers.append(pod)
        return pod

    def kill(self, name: str) -> None:
        podman("kill", "-s", "KILL", name)

    def exit_code(self, name: str) -> int | None:
        out = podman("inspect", name, "--format", "{{.State.Status}} {{.State.ExitCode}}").stdout
        status, code = out.split()
        return int(code) if status in ("exited", "stopped") else None

    def logs(self, name: str) -> str:
        r = podman("logs", name, check=False)
        return r.stdout + r.stderr

    def stamped_logs(self, name: str) -> str:
        """``name``'s log, each line after podman's timestamp of it."""
        r = podman("logs", "-t", name, check=False)
        return r.stdout + r.stderr

    def when_logged(self, name: str, text: str) -> float | None:
        """The time (epoch seconds, podman's own timestamp) of the first line of ``name``'s
        log that holds ``text``; None if none does."""
        r = podman("logs", "-t", name, check=False)
        for line in (r.stdout + r.stderr).splitlines():
            stamp, _, rest = line.partition(" ")
            if text in rest:
                day, _, clock = stamp.rstrip("Z").partition("T")
                whole, _, frac = clock.partition(".")
                when = datetime.datetime.fromisoformat(f"{day}T{whole}").replace(
                    tzinfo=datetime.timezone.utc)
                return when.timestamp() + float("0." + (frac.split("+")[0] or "0"))
        return None


def shared_dir(tmp_path: Path) -> Path:
    """A directory the containers share (a hostPath volume), writable by them."""
    d = Path(tempfile.mkdtemp(prefix="fuse-k8s-shared-", dir="/tmp"))
    os.chmod(d, 0o777)
    return d


def remove(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
