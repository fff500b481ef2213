"""Untrusted XML, parsed with defusedxml: no DTDs, no entities, clear errors."""

from __future__ import annotations

from pathlib import Path
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from sdnmpi.errors import FormatError


def parse(text: str | bytes, source: str) -> Element:
    """The root element, or a :class:`FormatError` naming ``source``."""
    try:
        root: Element = SafeET.fromstring(text, forbid_dtd=True)
    except DefusedXmlException as exc:
        raise FormatError(
            f"{source}: forbidden XML construct ({type(exc).__name__}): {exc}"
        ) from None
    except ParseError as exc:
        raise FormatError(f"{source}: malformed XML: {exc}") from None
    except LookupError as exc:  # <?xml encoding="..."?> that Python does not know
        raise FormatError(f"{source}: unknown XML encoding: {exc}") from None
    except (ValueError, RecursionError) as exc:  # e.g. a bad byte for the declared encoding
        raise FormatError(f"{source}: unreadable XML: {str(exc)[:200]}") from None
    return root


def read(path: Path) -> bytes:
    """A file's bytes, or a :class:`FormatError` naming it."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read: {exc.strerror}") from None
