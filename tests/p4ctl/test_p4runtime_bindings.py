"""The P4Runtime modules run on the upb protobuf runtime and are what the pinned protoc makes.

They come from ``third_party/p4runtime-upb`` (P4Runtime 1.6.0's protos regenerated for protobuf
7, because PyPI's ``p4runtime`` wheels hold gencode that protobuf 4.21 and later refuse to load;
see its README), installed by ``make`` in place of PyPI's ``p4runtime``.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import any_pb2, descriptor_pb2
from google.protobuf.internal import api_implementation
from google.rpc import status_pb2
from p4.config.v1 import p4info_pb2, p4types_pb2
from p4.v1 import p4data_pb2, p4runtime_pb2

BINDINGS = Path(__file__).resolve().parents[2] / "third_party" / "p4runtime-upb"
MODULES: tuple[ModuleType, ...] = (p4types_pb2, p4info_pb2, p4data_pb2, p4runtime_pb2)


def _source(module: ModuleType) -> str:
    """``p4/v1/p4runtime_pb2.py`` for ``p4.v1.p4runtime_pb2``."""
    return module.__name__.replace(".", "/") + ".py"


def test_p4runtime_messages_are_encoded_by_the_upb_runtime() -> None:
    assert api_implementation.Type() == "upb"


def test_installed_p4runtime_modules_are_the_ones_in_third_party() -> None:
    for module in MODULES:
        assert module.__file__ is not None
        assert Path(module.__file__).read_bytes() == (BINDINGS / _source(module)).read_bytes()


def test_third_party_modules_are_what_the_pinned_grpcio_tools_generates(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc")
    descriptors = descriptor_pb2.FileDescriptorSet()
    for module in (any_pb2, status_pb2, *MODULES):
        descriptors.file.add().ParseFromString(module.DESCRIPTOR.serialized_pb)
    (tmp_path / "set.pb").write_bytes(descriptors.SerializeToString())
    out = tmp_path / "out"
    out.mkdir()
    status = protoc.main(
        [
            "protoc",
            f"--descriptor_set_in={tmp_path / 'set.pb'}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            *(m.DESCRIPTOR.name for m in MODULES),
        ]
    )
    assert status == 0
    generated = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert len(generated) == 3 * len(MODULES)
    for path in generated:
        assert (BINDINGS / path).read_bytes() == (out / path).read_bytes(), path
