#!/usr/bin/env python3
"""Turn tests/vectors/tag-v1.json into a C include for tag_vectors.c (build output).

Usage: gen_vectors.py VECTORS.json OUT.inc   (Python 3 stdlib only)
Defines VALID_VECTORS[] and INVALID_VECTORS[] initialisers; the 'malformed'
entries (strings that are not 6-octet MACs) are Python-only and skipped.
"""

from __future__ import annotations

import json
import sys

STATUS = {"ok": "SDNMPI_TAG_OK", "unknown_primitive": "SDNMPI_TAG_UNKNOWN_PRIMITIVE"}
REASON = {
    "prefix": "SDNMPI_TAG_ERR_PREFIX",
    "version": "SDNMPI_TAG_ERR_VERSION",
    "crc": "SDNMPI_TAG_ERR_CRC",
    "job_slot": "SDNMPI_TAG_ERR_JOB_SLOT",
    "primitive": "SDNMPI_TAG_ERR_PRIMITIVE",
}


def mac_init(mac: str) -> str:
    octets = mac.split(":")
    if len(octets) != 6:
        raise SystemExit(f"gen_vectors: bad MAC {mac!r}")
    return "{" + ", ".join(f"0x{o}" for o in octets) + "}"


def main(src: str, dst: str) -> None:
    with open(src, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("layout_version") != 1:
        raise SystemExit(f"gen_vectors: {src}: unsupported layout_version")
    lines = [f"/* Generated from {src} by gen_vectors.py; do not edit. */"]
    lines.append("static const struct valid_vector VALID_VECTORS[] = {")
    for v in doc["valid"]:
        fields = f"{v['job_slot']}, {v['primitive']}, {v['src_rank']}, {v['dst_rank']}"
        lines.append(f"\t{{{fields}, {mac_init(v['mac'])}, {STATUS[v['status']]}}},")
    lines.append("};")
    lines.append("static const struct invalid_vector INVALID_VECTORS[] = {")
    for v in doc["invalid"]:
        lines.append(f"\t{{{mac_init(v['mac'])}, {REASON[v['reason']]}}},")
    lines.append("};")
    with open(dst, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: gen_vectors.py VECTORS.json OUT.inc")
    main(sys.argv[1], sys.argv[2])
