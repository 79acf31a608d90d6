from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class P4Data(_message.Message):
    __slots__ = ("bitstring", "varbit", "bool", "tuple", "struct", "header", "header_union", "header_stack", "header_union_stack", "enum", "error", "enum_value")
    BITSTRING_FIELD_NUMBER: _ClassVar[int]
    VARBIT_FIELD_NUMBER: _ClassVar[int]
    BOOL_FIELD_NUMBER: _ClassVar[int]
    TUPLE_FIELD_NUMBER: _ClassVar[int]
    STRUCT_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    HEADER_UNION_FIELD_NUMBER: _ClassVar[int]
    HEADER_STACK_FIELD_NUMBER: _ClassVar[int]
    HEADER_UNION_STACK_FIELD_NUMBER: _ClassVar[int]
    ENUM_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ENUM_VALUE_FIELD_NUMBER: _ClassVar[int]
    bitstring: bytes
    varbit: P4Varbit
    bool: bool
    tuple: P4StructLike
    struct: P4StructLike
    header: P4Header
    header_union: P4HeaderUnion
    header_stack: P4HeaderStack
    header_union_stack: P4HeaderUnionStack
    enum: str
    error: str
    enum_value: bytes
    def __init__(self, bitstring: _Optional[bytes] = ..., varbit: _Optional[_Union[P4Varbit, _Mapping]] = ..., bool: _Optional[bool] = ..., tuple: _Optional[_Union[P4StructLike, _Mapping]] = ..., struct: _Optional[_Union[P4StructLike, _Mapping]] = ..., header: _Optional[_Union[P4Header, _Mapping]] = ..., header_union: _Optional[_Union[P4HeaderUnion, _Mapping]] = ..., header_stack: _Optional[_Union[P4HeaderStack, _Mapping]] = ..., header_union_stack: _Optional[_Union[P4HeaderUnionStack, _Mapping]] = ..., enum: _Optional[str] = ..., error: _Optional[str] = ..., enum_value: _Optional[bytes] = ...) -> None: ...

class P4Varbit(_message.Message):
    __slots__ = ("bitstring", "bitwidth")
    BITSTRING_FIELD_NUMBER: _ClassVar[int]
    BITWIDTH_FIELD_NUMBER: _ClassVar[int]
    bitstring: bytes
    bitwidth: int
    def __init__(self, bitstring: _Optional[bytes] = ..., bitwidth: _Optional[int] = ...) -> None: ...

class P4StructLike(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[P4Data]
    def __init__(self, members: _Optional[_Iterable[_Union[P4Data, _Mapping]]] = ...) -> None: ...

class P4Header(_message.Message):
    __slots__ = ("is_valid", "bitstrings")
    IS_VALID_FIELD_NUMBER: _ClassVar[int]
    BITSTRINGS_FIELD_NUMBER: _ClassVar[int]
    is_valid: bool
    bitstrings: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, is_valid: _Optional[bool] = ..., bitstrings: _Optional[_Iterable[bytes]] = ...) -> None: ...

class P4HeaderUnion(_message.Message):
    __slots__ = ("valid_header_name", "valid_header")
    VALID_HEADER_NAME_FIELD_NUMBER: _ClassVar[int]
    VALID_HEADER_FIELD_NUMBER: _ClassVar[int]
    valid_header_name: str
    valid_header: P4Header
    def __init__(self, valid_header_name: _Optional[str] = ..., valid_header: _Optional[_Union[P4Header, _Mapping]] = ...) -> None: ...

class P4HeaderStack(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[P4Header]
    def __init__(self, entries: _Optional[_Iterable[_Union[P4Header, _Mapping]]] = ...) -> None: ...

class P4HeaderUnionStack(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[P4HeaderUnion]
    def __init__(self, entries: _Optional[_Iterable[_Union[P4HeaderUnion, _Mapping]]] = ...) -> None: ...
