"""Wire formats shared by the C node side and the Python controller side.

``sdnmpi.wire.tag`` is the MPI context tag carried in the destination MAC (layout v1,
``docs/tag-layout.md``); its canonical C definition is ``csrc/include/sdnmpi/tag.h``
and both are checked against ``tests/vectors/tag-v1.json``.
"""

from __future__ import annotations

from sdnmpi.wire.tag import (
    MAX_JOB_SLOT,
    MAX_PRIMITIVE,
    MAX_RANK,
    TAG_VERSION,
    Primitive,
    Tag,
    TagError,
    decode,
    is_tag,
    primitive_name,
)

__all__ = [
    "MAX_JOB_SLOT",
    "MAX_PRIMITIVE",
    "MAX_RANK",
    "TAG_VERSION",
    "Primitive",
    "Tag",
    "TagError",
    "decode",
    "is_tag",
    "primitive_name",
]
