"""Container image references, checked against the grammar of distribution/reference (the
library Docker, containerd and registries parse references with) before any reaches a launch
file, a command line or a label:

    reference        := name [ ":" tag ] [ "@" digest ]
    name             := [domain "/"] remote-name
    domain           := host [":" port-number]
    host             := domain-name | "[" IPv6address "]"
    domain-name      := domain-component ["." domain-component]*
    domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
    port-number      := /[0-9]+/
    remote-name      := path-component ["/" path-component]*
    path-component   := alpha-numeric [separator alpha-numeric]*
    alpha-numeric    := /[a-z0-9]+/
    separator        := /[_.]|__|[-]+/
    tag              := /[\\w][\\w.-]{0,127}/
    digest           := algorithm ":" hex
    algorithm        := /[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*/
    hex              := /[0-9a-fA-F]{32,}/

and the name (domain and path) at most 255 characters (NameTotalLengthMax). Every character a
reference may hold is one a shell, YAML or a `docker run` argument takes literally: no space,
quote, `$`, `;` or newline can pass.
"""

from __future__ import annotations

import re

from tbdkit.core.errors import UserError

NAME_TOTAL_LENGTH_MAX = 255

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = f"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?", re.ASCII)

EXAMPLE = "tbdkit/pytorch:0.1.0, nvcr.io/nvidia/pytorch:24.05-py3 or name@sha256:<64 hex digits>"


def validate_image_reference(ref: str) -> str:
    """`ref` unchanged if it is a valid image reference; otherwise a UserError naming it."""
    match = REFERENCE.fullmatch(ref) if isinstance(ref, str) else None
    if match is None:
        raise UserError(
            f"{ref!r} is not a container image reference (name[:tag][@digest] with lowercase "
            f"name parts, e.g. {EXAMPLE}): pass a valid image."
        )
    if len(match["name"]) > NAME_TOTAL_LENGTH_MAX:
        raise UserError(
            f"The image name in {ref[:40]!r}... is {len(match['name'])} characters long, more than "
            f"the {NAME_TOTAL_LENGTH_MAX} a registry accepts: pass a shorter image name."
        )
    return ref


_DIGEST_RE = re.compile(_DIGEST, re.ASCII)


def validate_digest(value: str, what: str = "image digest") -> str:
    """A content digest such as `sha256:<64 hex>`; else one sentence with the fix."""
    if not isinstance(value, str) or not _DIGEST_RE.fullmatch(value):
        raise UserError(
            f"The {what} {value!r} is not a content digest (algorithm:hex, e.g. sha256:...): "
            "rebuild the image with `tbdkit images build`."
        )
    return value
