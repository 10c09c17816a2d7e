"""The image's sources agree with each other: the lock with pyproject's ranges, the Dockerfile with the chart
and .dockerignore; and the real node's pause image is a well-formed OCI archive. (The image itself is built
and run on a real node in tests/integration/test_real_node.py.)"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from phalanx.devcluster import realnode

ROOT = Path(__file__).resolve().parents[3]


def lock(name: str) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / name).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line.strip())
        assert match, f"{name}: not an exact pin: {line!r}"
        pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def test_the_lock_pins_every_dependency_of_pyproject_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = lock("requirements.lock")
    for spec in project["project"]["dependencies"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements.lock (hack/image.sh --lock)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (spec, pins[name])
    assert "phalanx" not in pins and "setuptools" not in pins and "pip" not in pins
    (backend,) = project["build-system"]["requires"]
    build = lock("requirements-build.lock")
    assert Requirement(backend).specifier.contains(build[canonicalize_name(Requirement(backend).name)])


def test_the_dockerfile_matches_the_chart_and_dockerignore() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE=\S+", dockerfile, re.M), "a BASE build argument with a default"
    assert dockerfile.count("FROM ${BASE}") == 2, "multi-stage, both on BASE"
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    values = yaml.safe_load((ROOT / "charts" / "phalanx" / "values.yaml").read_text())
    pod = values["podSecurityContext"]
    assert (int(user[0]), int(user[1])) == (pod["runAsUser"], pod["runAsGroup"]), "the chart's numeric user"
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.+)$", dockerfile, re.M)
    assert json.loads(entrypoint) == ["phalanx", "run"]
    assert values["command"] == ["phalanx"], (
        "the chart's command replaces the entrypoint with the same program"
    )
    assert "--no-deps -r /src/requirements.lock" in dockerfile and "pip check" in dockerfile

    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")]
    copied = {
        part.rstrip("/")
        for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile, re.M)
        for part in line.split()[:-1]
    }
    assert copied == {entry[1:].rstrip("/") for entry in ignore}, "the context holds exactly what is copied"


def test_the_pause_image_is_a_well_formed_oci_archive(tmp_path: Path) -> None:
    binary = tmp_path / "pause-bin"
    binary.write_bytes(b"\x7fELF not really")
    archive = tmp_path / "pause.oci.tar"
    realnode.write_pause_image(binary, archive)
    with tarfile.open(archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}

    def blob(descriptor: dict[str, object]) -> bytes:
        digest = str(descriptor["digest"])
        data = files["blobs/sha256/" + digest.removeprefix("sha256:")]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest and len(data) == descriptor["size"]
        return data

    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == realnode.PAUSE_IMAGE
    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    assert config["config"]["Entrypoint"] == ["/pause"] and config["os"] == "linux"
    assert config["architecture"] == entry["platform"]["architecture"]
    (layer_descriptor,) = manifest["layers"]
    layer = gzip.decompress(blob(layer_descriptor))
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (member,) = tar.getmembers()
        assert member.name == "pause" and member.mode == 0o755
        assert tar.extractfile(member).read() == binary.read_bytes()  # type: ignore[union-attr]
    # Reproducible: the same binary gives the same image.
    again = tmp_path / "again.tar"
    realnode.write_pause_image(binary, again)
    with tarfile.open(again) as tar:
        index = tar.extractfile("index.json").read()  # type: ignore[union-attr]
    assert json.loads(files["index.json"]) == json.loads(index)


def test_real_node_apiserver_flags_turn_service_accounts_on_and_keep_the_rest() -> None:
    base = ["--bind-address=127.0.0.1", "--disable-admission-plugins=ServiceAccount", "--secure-port=1"]
    args = realnode.apiserver_args(base, Path("/tmp/x"))
    assert "--disable-admission-plugins=ServiceAccount" not in args
    assert "--bind-address=127.0.0.1" in args, "still loopback only: pods reach it through the DNAT"
    assert "--kubelet-preferred-address-types=InternalIP,Hostname" in args
    assert "--enable-aggregator-routing=true" in args
