"""Regenerate the P4Runtime Python bindings in this folder for the upb protobuf runtime.

The ``p4runtime`` wheel on PyPI (1.4.1 up to 1.6.0) ships modules made by a protoc older than
3.19, which protobuf 4.21 and later refuse to load ("Descriptors cannot be created directly"),
so the only way to use that wheel is the pure-Python protobuf runtime. Its modules still carry
each ``.proto`` file as a serialized ``FileDescriptorProto``; this script takes those, adds the
two they import (``google/protobuf/any.proto`` from protobuf, ``google/rpc/status.proto`` from
googleapis-common-protos) and runs grpcio-tools' protoc on them::

    pip download --no-deps p4runtime==1.6.0 -d /tmp/wheel
    pip install grpcio-tools==1.85.1   # its protoc writes gencode for protobuf 7.35.1 and later
    python third_party/p4runtime-upb/generate.py /tmp/wheel/p4runtime-1.6.0-py3-none-any.whl

The generated modules check at import that the protobuf runtime is at least the version of
their gencode (``Protobuf Python Version`` in their header), so a new grpcio-tools here means
raising the ``protobuf`` floor in ``pyproject.toml`` too.
"""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path

from google.protobuf import any_pb2, descriptor_pb2
from google.rpc import status_pb2
from grpc_tools import protoc

HERE = Path(__file__).resolve().parent
PROTOS = ["p4/config/v1/p4types", "p4/config/v1/p4info", "p4/v1/p4data", "p4/v1/p4runtime"]
PACKAGES = ["p4", "p4/config", "p4/config/v1", "p4/v1"]


def descriptors(wheel: Path) -> descriptor_pb2.FileDescriptorSet:
    """The `FileDescriptorSet` of P4Runtime's protos, as the modules in `wheel` embed them."""
    found = descriptor_pb2.FileDescriptorSet()
    for dependency in (any_pb2, status_pb2):
        found.file.add().ParseFromString(dependency.DESCRIPTOR.serialized_pb)
    with zipfile.ZipFile(wheel) as archive:
        for proto in PROTOS:
            tree = ast.parse(archive.read(f"{proto}_pb2.py"))
            blobs = [
                ast.literal_eval(node.value)
                for node in ast.walk(tree)
                if isinstance(node, ast.keyword) and node.arg == "serialized_pb"
            ]
            if len(blobs) != 1:
                raise SystemExit(f"{wheel.name}: {proto}_pb2.py has {len(blobs)} descriptors")
            found.file.add().ParseFromString(blobs[0])
    return found


def generate(wheel: Path, out: Path) -> None:
    """Write the ``_pb2``, ``_pb2_grpc`` modules and ``.pyi`` stubs of `wheel`'s protos to `out`."""
    descriptor_set = out / "p4runtime.descriptors"
    descriptor_set.write_bytes(descriptors(wheel).SerializeToString())
    try:
        status = protoc.main(
            [
                "protoc",
                f"--descriptor_set_in={descriptor_set}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                *(f"{proto}.proto" for proto in PROTOS),
            ]
        )
    finally:
        descriptor_set.unlink()
    if status != 0:
        raise SystemExit(f"protoc failed with status {status}")
    for package in PACKAGES:
        (out / package / "__init__.py").touch()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} p4runtime-VERSION-py3-none-any.whl")
    generate(Path(sys.argv[1]), HERE)
