"""Names of the Workloads and PodGroups made for a Job, computed as upstream's Job controller does.

Matching upstream (k8s.io/kubernetes pkg/controller/job, v1.37) keeps a Job's objects easy to find
for anyone who knows the in-tree names, and lets tests compare the two side by side.
"""

from __future__ import annotations

from phalanx.api.formats import DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX, LABEL_NAME_MAX, dns_label_problems

# k8s.io/apimachinery/pkg/util/rand: consonants and digits only, so hashes spell no words.
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193
_TEMPLATE_SUFFIX = "-pgt-0"


def fnv32a(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data`` (Go's hash/fnv New32a)."""
    value = _FNV32_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return value


def safe_encode(text: str) -> str:
    """Map each character to a consonant or digit (apimachinery's rand.SafeEncodeString)."""
    return "".join(_SAFE_ALPHABET[ord(c) % len(_SAFE_ALPHABET)] for c in text)


def _hash(data: bytes) -> str:
    return safe_encode(str(fnv32a(data)))


def pod_group_template_name(job_name: str) -> str:
    """The Workload template of a Job: ``<job>-pgt-0``, as upstream.

    Upstream's name is not always a DNS label (a Job name may be 63 characters long, or contain
    dots); Phalanx then replaces dots with '-' and shortens the Job name so the template name fits.
    """
    name = f"{job_name}{_TEMPLATE_SUFFIX}"
    if not dns_label_problems(name):
        return name
    prefix = job_name.replace(".", "-")[: DNS_LABEL_MAX - len(_TEMPLATE_SUFFIX)]
    return f"{prefix}{_TEMPLATE_SUFFIX}"


def workload_name(job_name: str, job_uid: str) -> str:
    """The Workload of a Job: ``<job>-<hash of the Job's UID>``, as upstream."""
    # Upstream hashes the UID through DeepHashObject, which prints it with go-spew as
    # "(types.UID)<uid>"; hashing the same text gives the same name.
    suffix = _hash(f"(types.UID){job_uid}".encode())
    prefix = _truncate(job_name, DNS_SUBDOMAIN_MAX - len(suffix) - 1)
    return f"{prefix}-{suffix}"


def pod_group_name(workload: str, template: str) -> str:
    """The PodGroup of a Workload template: ``<workload>-<template>-<hash of both>``, as upstream.

    When that is longer than a DNS subdomain, each part gets half the room; a part shorter than
    its half gives the rest to the other.
    """
    suffix = _hash(workload.encode() + template.encode())
    room = DNS_SUBDOMAIN_MAX - len(suffix) - 2
    if len(workload) + len(template) > room:
        half = room // 2
        if len(workload) <= half:
            template = template[: room - len(workload)]
        elif len(template) <= half:
            workload = workload[: room - len(template)]
        else:
            workload, template = workload[: room - half], template[:half]
        workload, template = workload.rstrip("."), template.rstrip(".")  # see _truncate
    return f"{workload}-{template}-{suffix}"


def pod_group_label_value(pod_group: str) -> str:
    """The value of a pod's ``phalanx.dev/pod-group`` label: the PodGroup's name, if it fits.

    Label values stop at 63 characters and PodGroup names often do not (a 20-character Job name
    gives 69). A longer name is cut and given a hash of the whole, so the value stays unique and
    a selector can be computed from the name alone.
    """
    if len(pod_group) <= LABEL_NAME_MAX:
        return pod_group
    suffix = _hash(pod_group.encode())
    prefix = pod_group[: LABEL_NAME_MAX - len(suffix) - 1].rstrip("-.")
    return f"{prefix}-{suffix}"


def _truncate(name: str, length: int) -> str:
    # A cut that ends in '.' would put ".-" in the name, which no DNS subdomain allows.
    return name[:length].rstrip(".")
