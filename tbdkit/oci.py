"""Image references checked against the OCI distribution reference grammar before they reach a
command line or a launch file: `[domain[:port]/]path[:tag][@digest]`."""

from __future__ import annotations

import re

from tbdkit.errors import UserError

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{DIGEST})?")
_DIGEST = re.compile(DIGEST)
NAME_MAX = 255


def validate_image_reference(ref: str) -> str:
    """`ref` unchanged when it is a valid image reference; else one sentence with the fix."""
    name = ref.split("@", 1)[0]
    if not isinstance(ref, str) or not _REFERENCE.fullmatch(ref) or len(name.rsplit(":", 1)[0]) > NAME_MAX:
        raise UserError(f"{ref!r} is not a valid image reference: use the form registry/name:tag or "
                        "name@sha256:<digest> (lower-case name, no spaces, quotes or newlines).")
    return ref


def validate_digest(value: str, what: str = "image digest") -> str:
    """A content digest such as `sha256:<64 hex>`; else one sentence with the fix."""
    if not _DIGEST.fullmatch(value):
        raise UserError(f"The {what} {value!r} is not a content digest (algorithm:hex, e.g. sha256:...): "
                        "rebuild the image with `tbdkit images build`.")
    return value
