"""Kubernetes string formats: DNS label, DNS subdomain and label key.

Each format has a ``*_problems`` function that explains what is wrong in words a user can act on,
and a pydantic type whose CRD schema carries the same rule, so the operator and the apiserver
reject the same strings.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_NAME_MAX = 63
LABEL_KEY_MAX = DNS_SUBDOMAIN_MAX + 1 + LABEL_NAME_MAX

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
# The 63-character limit of the name part is written into the pattern because the apiserver
# has one pattern per string; bounded repetition works in both RE2 and Python.
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"

DNS_LABEL_PATTERN = rf"^{_DNS_LABEL}$"
DNS_SUBDOMAIN_PATTERN = rf"^{_DNS_SUBDOMAIN}$"
LABEL_KEY_PATTERN = rf"^({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}$"
# The prefix length (at most 253) does not fit in the pattern, so the CRD checks it with CEL.
LABEL_KEY_PREFIX_RULE = "!self.contains('/') || self.matches('^[^/]{1,253}/')"

_dns_label_re = re.compile(_DNS_LABEL)
_dns_subdomain_re = re.compile(_DNS_SUBDOMAIN)
_label_name_re = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _pattern_problems(value: str, limit: int, pattern: re.Pattern[str], characters: str) -> list[str]:
    if not value:
        return ["must not be empty"]
    problems = []
    if len(value) > limit:
        problems.append(f"must be at most {limit} characters")
    if not pattern.fullmatch(value):
        problems.append(f"must consist of {characters}, and start and end with an alphanumeric character")
    return problems


def dns_label_problems(value: str) -> list[str]:
    """What makes ``value`` an invalid DNS label (RFC 1123), or [] if it is valid."""
    return _pattern_problems(value, DNS_LABEL_MAX, _dns_label_re, "lower case alphanumeric characters or '-'")


def dns_subdomain_problems(value: str) -> list[str]:
    """What makes ``value`` an invalid DNS subdomain (RFC 1123), or [] if it is valid."""
    return _pattern_problems(
        value, DNS_SUBDOMAIN_MAX, _dns_subdomain_re, "lower case alphanumeric characters, '-' or '.'"
    )


def label_key_problems(value: str) -> list[str]:
    """What makes ``value`` an invalid label key (``[prefix/]name``), or [] if it is valid."""
    if not value:
        return ["must not be empty"]
    parts = value.split("/")
    if len(parts) > 2:
        return ["must contain at most one '/' (an optional DNS subdomain prefix, then a name)"]
    problems = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("prefix before '/' must not be empty")
        else:
            problems.extend(f"prefix {p}" for p in dns_subdomain_problems(prefix))
    name = parts[-1]
    if not name:
        problems.append("name part must not be empty")
    else:
        if len(name) > LABEL_NAME_MAX:
            problems.append(f"name part must be at most {LABEL_NAME_MAX} characters")
        if not _label_name_re.fullmatch(name):
            problems.append(
                "name part must consist of alphanumeric characters, '-', '_' or '.', "
                "and start and end with an alphanumeric character"
            )
    return problems


def _checker(what: str, problems: Any) -> AfterValidator:
    def check(value: str) -> str:
        found = problems(value)
        if found:
            quoted = json.dumps(value, ensure_ascii=False)
            raise ValueError(f"{quoted} is not a valid {what}: {'; '.join(found)}")
        return value

    return AfterValidator(check)


DNSLabel = Annotated[
    str,
    _checker("DNS label", dns_label_problems),
    WithJsonSchema({"type": "string", "maxLength": DNS_LABEL_MAX, "pattern": DNS_LABEL_PATTERN}),
]
"""A DNS label (RFC 1123): lower-case alphanumerics and '-', at most 63 characters."""

DNSSubdomain = Annotated[
    str,
    _checker("DNS subdomain", dns_subdomain_problems),
    WithJsonSchema({"type": "string", "maxLength": DNS_SUBDOMAIN_MAX, "pattern": DNS_SUBDOMAIN_PATTERN}),
]
"""A DNS subdomain (RFC 1123): dot-separated DNS labels, at most 253 characters."""

LabelKey = Annotated[
    str,
    _checker("label key", label_key_problems),
    WithJsonSchema(
        {
            "type": "string",
            "maxLength": LABEL_KEY_MAX,
            "pattern": LABEL_KEY_PATTERN,
            "x-kubernetes-validations": [
                {
                    "rule": LABEL_KEY_PREFIX_RULE,
                    "message": "the prefix before '/' must be at most 253 characters",
                }
            ],
        }
    ),
]
"""A label key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
