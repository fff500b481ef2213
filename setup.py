"""Build hook: the manager's gRPC stubs, generated from proto/ into the wheel.

``src/sdnmpi/wire/manager_pb2*.py`` are build outputs (``make proto`` for a checkout,
not committed), so a wheel built from a clean clone gets them here: ``build_py``
runs grpc_tools.protoc (a build requirement, pyproject.toml) into its build
directory.  The sdist carries proto/ (MANIFEST.in) and does the same when built.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PROTO_ROOT = Path(__file__).resolve().parent / "proto"
PROTOS = ["sdnmpi/wire/manager.proto"]


class BuildPyWithStubs(build_py):
    """``build_py``, then the stubs of :data:`PROTOS` next to the built package."""

    def run(self) -> None:
        super().run()
        if self.dry_run:
            return
        from grpc_tools import protoc  # build requirement

        out = Path(self.build_lib)
        for proto in PROTOS:
            argv = [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                str(PROTO_ROOT / proto),
            ]
            if protoc.main(argv) != 0:
                raise SystemExit(f"protoc failed on {PROTO_ROOT / proto}")
        stubs = sorted(p.name for p in (out / "sdnmpi" / "wire").glob("manager_pb2*.py"))
        if len(stubs) != 2:
            raise SystemExit(f"protoc: expected 2 stub modules in {out}, got {stubs}")


setup(cmdclass={"build_py": BuildPyWithStubs})
