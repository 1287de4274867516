"""What fuse's image carries (the image scripts/build_image.sh built, FUSE_K8S_IMAGE): no
secret, key or token in any of its layers or its configuration.  The job's secret and the ssh
keys belong in Kubernetes Secrets (the chart's), and each container makes its own sshd host
keys; a key baked into a layer is shared by every user of the image.

Every layer of ``podman image save`` is read: no file may be named like a key (ssh host keys,
``id_*`` ssh keys, ``*.pem``/``*.key`` outside the system's CA bundle) and no file under 1 MB
(keys and token files are small) may hold a private key or a fuse job secret; the image's
environment may set no secret, key, token or password variable."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile

import pytest

from kubernetes_util import image

pytestmark = pytest.mark.timeout(300)

KEY_NAME = re.compile(r"(^|/)(ssh_host_[a-z0-9]+_key(\.pub)?|id_(rsa|dsa|ecdsa|ed25519)"
                      r"(\.pub)?|[^/]+\.(pem|key|p12|pfx))$")
# the system's trust store and Python packages' test fixtures hold public certificates
ALLOWED_KEY_FILES = re.compile(r"(^|/)(etc/ssl/certs|usr/share/ca-certificates|"
                               r"usr/lib/ssl|.*/site-packages/(certifi|pip/_vendor/certifi))/")
# a key's header followed by its base64 body (ssh's binaries hold the header alone)
PRIVATE = re.compile(rb"-----BEGIN ([A-Z]+ )?PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{40}|"
                     rb"FUSE_SECRET_KEY=[0-9a-f]{16}")
SECRET_VAR = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|PRIVATE|_KEY$", re.I)
SMALL = 1 << 20


def test_no_secret_key_or_token_is_in_an_image_layer(tmp_path):
    repo, tag = image()
    saved = tmp_path / "image.tar"
    subprocess.run(["podman", "image", "save", "--format", "docker-archive", "-o", str(saved),
                    f"{repo}:{tag}"], check=True, capture_output=True, timeout=240)
    found, scanned = [], 0
    with tarfile.open(saved) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))[0]
        config = json.load(archive.extractfile(manifest["Config"]))
        for layer_name in manifest["Layers"]:
            with tarfile.open(fileobj=archive.extractfile(layer_name), mode="r|*") as layer:
                for member in layer:
                    name = member.name.lstrip("./")
                    if KEY_NAME.search(name) and not ALLOWED_KEY_FILES.search(name):
                        found.append(f"{layer_name}: {name} (named like a key)")
                    if member.isfile() and member.size < SMALL:
                        scanned += 1
                        data = layer.extractfile(member).read()
                        if PRIVATE.search(data) and not ALLOWED_KEY_FILES.search(name):
                            found.append(f"{layer_name}: {name} (holds a private key/secret)")
    env = config.get("config", {}).get("Env") or []
    found += [f"config: ENV {var.split('=')[0]}" for var in env
              if SECRET_VAR.search(var.split("=")[0]) and var.split("=", 1)[1]]
    assert scanned > 1000, f"only {scanned} files read: not the image's layers?"
    assert not found, "\n".join(found)
    print(f"{len(manifest['Layers'])} layers, {scanned} files under 1 MB read: no key or secret")
