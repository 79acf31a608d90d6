from google.protobuf import any_pb2 as _any_pb2
from google.rpc import status_pb2 as _status_pb2
from p4.config.v1 import p4info_pb2 as _p4info_pb2
from p4.v1 import p4data_pb2 as _p4data_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SdnPort(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SDN_PORT_UNKNOWN: _ClassVar[SdnPort]
    SDN_PORT_MIN: _ClassVar[SdnPort]
    SDN_PORT_MAX: _ClassVar[SdnPort]
    SDN_PORT_RECIRCULATE: _ClassVar[SdnPort]
    SDN_PORT_CPU: _ClassVar[SdnPort]
SDN_PORT_UNKNOWN: SdnPort
SDN_PORT_MIN: SdnPort
SDN_PORT_MAX: SdnPort
SDN_PORT_RECIRCULATE: SdnPort
SDN_PORT_CPU: SdnPort

class WriteRequest(_message.Message):
    __slots__ = ("device_id", "role_id", "role", "election_id", "updates", "atomicity")
    class Atomicity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CONTINUE_ON_ERROR: _ClassVar[WriteRequest.Atomicity]
        ROLLBACK_ON_ERROR: _ClassVar[WriteRequest.Atomicity]
        DATAPLANE_ATOMIC: _ClassVar[WriteRequest.Atomicity]
    CONTINUE_ON_ERROR: WriteRequest.Atomicity
    ROLLBACK_ON_ERROR: WriteRequest.Atomicity
    DATAPLANE_ATOMIC: WriteRequest.Atomicity
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ELECTION_ID_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    ATOMICITY_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    role_id: int
    role: str
    election_id: Uint128
    updates: _containers.RepeatedCompositeFieldContainer[Update]
    atomicity: WriteRequest.Atomicity
    def __init__(self, device_id: _Optional[int] = ..., role_id: _Optional[int] = ..., role: _Optional[str] = ..., election_id: _Optional[_Union[Uint128, _Mapping]] = ..., updates: _Optional[_Iterable[_Union[Update, _Mapping]]] = ..., atomicity: _Optional[_Union[WriteRequest.Atomicity, str]] = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("device_id", "role", "entities")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    role: str
    entities: _containers.RepeatedCompositeFieldContainer[Entity]
    def __init__(self, device_id: _Optional[int] = ..., role: _Optional[str] = ..., entities: _Optional[_Iterable[_Union[Entity, _Mapping]]] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("entities",)
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    entities: _containers.RepeatedCompositeFieldContainer[Entity]
    def __init__(self, entities: _Optional[_Iterable[_Union[Entity, _Mapping]]] = ...) -> None: ...

class Update(_message.Message):
    __slots__ = ("type", "entity")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[Update.Type]
        INSERT: _ClassVar[Update.Type]
        MODIFY: _ClassVar[Update.Type]
        DELETE: _ClassVar[Update.Type]
    UNSPECIFIED: Update.Type
    INSERT: Update.Type
    MODIFY: Update.Type
    DELETE: Update.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    type: Update.Type
    entity: Entity
    def __init__(self, type: _Optional[_Union[Update.Type, str]] = ..., entity: _Optional[_Union[Entity, _Mapping]] = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ("extern_entry", "table_entry", "action_profile_member", "action_profile_group", "meter_entry", "direct_meter_entry", "counter_entry", "direct_counter_entry", "packet_replication_engine_entry", "value_set_entry", "register_entry", "digest_entry")
    EXTERN_ENTRY_FIELD_NUMBER: _ClassVar[int]
    TABLE_ENTRY_FIELD_NUMBER: _ClassVar[int]
    ACTION_PROFILE_MEMBER_FIELD_NUMBER: _ClassVar[int]
    ACTION_PROFILE_GROUP_FIELD_NUMBER: _ClassVar[int]
    METER_ENTRY_FIELD_NUMBER: _ClassVar[int]
    DIRECT_METER_ENTRY_FIELD_NUMBER: _ClassVar[int]
    COUNTER_ENTRY_FIELD_NUMBER: _ClassVar[int]
    DIRECT_COUNTER_ENTRY_FIELD_NUMBER: _ClassVar[int]
    PACKET_REPLICATION_ENGINE_ENTRY_FIELD_NUMBER: _ClassVar[int]
    VALUE_SET_ENTRY_FIELD_NUMBER: _ClassVar[int]
    REGISTER_ENTRY_FIELD_NUMBER: _ClassVar[int]
    DIGEST_ENTRY_FIELD_NUMBER: _ClassVar[int]
    extern_entry: ExternEntry
    table_entry: TableEntry
    action_profile_member: ActionProfileMember
    action_profile_group: ActionProfileGroup
    meter_entry: MeterEntry
    direct_meter_entry: DirectMeterEntry
    counter_entry: CounterEntry
    direct_counter_entry: DirectCounterEntry
    packet_replication_engine_entry: PacketReplicationEngineEntry
    value_set_entry: ValueSetEntry
    register_entry: RegisterEntry
    digest_entry: DigestEntry
    def __init__(self, extern_entry: _Optional[_Union[ExternEntry, _Mapping]] = ..., table_entry: _Optional[_Union[TableEntry, _Mapping]] = ..., action_profile_member: _Optional[_Union[ActionProfileMember, _Mapping]] = ..., action_profile_group: _Optional[_Union[ActionProfileGroup, _Mapping]] = ..., meter_entry: _Optional[_Union[MeterEntry, _Mapping]] = ..., direct_meter_entry: _Optional[_Union[DirectMeterEntry, _Mapping]] = ..., counter_entry: _Optional[_Union[CounterEntry, _Mapping]] = ..., direct_counter_entry: _Optional[_Union[DirectCounterEntry, _Mapping]] = ..., packet_replication_engine_entry: _Optional[_Union[PacketReplicationEngineEntry, _Mapping]] = ..., value_set_entry: _Optional[_Union[ValueSetEntry, _Mapping]] = ..., register_entry: _Optional[_Union[RegisterEntry, _Mapping]] = ..., digest_entry: _Optional[_Union[DigestEntry, _Mapping]] = ...) -> None: ...

class ExternEntry(_message.Message):
    __slots__ = ("extern_type_id", "extern_id", "entry")
    EXTERN_TYPE_ID_FIELD_NUMBER: _ClassVar[int]
    EXTERN_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    extern_type_id: int
    extern_id: int
    entry: _any_pb2.Any
    def __init__(self, extern_type_id: _Optional[int] = ..., extern_id: _Optional[int] = ..., entry: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...

class TableEntry(_message.Message):
    __slots__ = ("table_id", "match", "action", "priority", "controller_metadata", "meter_config", "counter_data", "meter_counter_data", "is_default_action", "idle_timeout_ns", "time_since_last_hit", "metadata", "is_const")
    class IdleTimeout(_message.Message):
        __slots__ = ("elapsed_ns",)
        ELAPSED_NS_FIELD_NUMBER: _ClassVar[int]
        elapsed_ns: int
        def __init__(self, elapsed_ns: _Optional[int] = ...) -> None: ...
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_METADATA_FIELD_NUMBER: _ClassVar[int]
    METER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    COUNTER_DATA_FIELD_NUMBER: _ClassVar[int]
    METER_COUNTER_DATA_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_ACTION_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_NS_FIELD_NUMBER: _ClassVar[int]
    TIME_SINCE_LAST_HIT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    IS_CONST_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    match: _containers.RepeatedCompositeFieldContainer[FieldMatch]
    action: TableAction
    priority: int
    controller_metadata: int
    meter_config: MeterConfig
    counter_data: CounterData
    meter_counter_data: MeterCounterData
    is_default_action: bool
    idle_timeout_ns: int
    time_since_last_hit: TableEntry.IdleTimeout
    metadata: bytes
    is_const: bool
    def __init__(self, table_id: _Optional[int] = ..., match: _Optional[_Iterable[_Union[FieldMatch, _Mapping]]] = ..., action: _Optional[_Union[TableAction, _Mapping]] = ..., priority: _Optional[int] = ..., controller_metadata: _Optional[int] = ..., meter_config: _Optional[_Union[MeterConfig, _Mapping]] = ..., counter_data: _Optional[_Union[CounterData, _Mapping]] = ..., meter_counter_data: _Optional[_Union[MeterCounterData, _Mapping]] = ..., is_default_action: _Optional[bool] = ..., idle_timeout_ns: _Optional[int] = ..., time_since_last_hit: _Optional[_Union[TableEntry.IdleTimeout, _Mapping]] = ..., metadata: _Optional[bytes] = ..., is_const: _Optional[bool] = ...) -> None: ...

class FieldMatch(_message.Message):
    __slots__ = ("field_id", "exact", "ternary", "lpm", "range", "optional", "other")
    class Exact(_message.Message):
        __slots__ = ("value",)
        VALUE_FIELD_NUMBER: _ClassVar[int]
        value: bytes
        def __init__(self, value: _Optional[bytes] = ...) -> None: ...
    class Ternary(_message.Message):
        __slots__ = ("value", "mask")
        VALUE_FIELD_NUMBER: _ClassVar[int]
        MASK_FIELD_NUMBER: _ClassVar[int]
        value: bytes
        mask: bytes
        def __init__(self, value: _Optional[bytes] = ..., mask: _Optional[bytes] = ...) -> None: ...
    class LPM(_message.Message):
        __slots__ = ("value", "prefix_len")
        VALUE_FIELD_NUMBER: _ClassVar[int]
        PREFIX_LEN_FIELD_NUMBER: _ClassVar[int]
        value: bytes
        prefix_len: int
        def __init__(self, value: _Optional[bytes] = ..., prefix_len: _Optional[int] = ...) -> None: ...
    class Range(_message.Message):
        __slots__ = ("low", "high")
        LOW_FIELD_NUMBER: _ClassVar[int]
        HIGH_FIELD_NUMBER: _ClassVar[int]
        low: bytes
        high: bytes
        def __init__(self, low: _Optional[bytes] = ..., high: _Optional[bytes] = ...) -> None: ...
    class Optional(_message.Message):
        __slots__ = ("value",)
        VALUE_FIELD_NUMBER: _ClassVar[int]
        value: bytes
        def __init__(self, value: _Optional[bytes] = ...) -> None: ...
    FIELD_ID_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    TERNARY_FIELD_NUMBER: _ClassVar[int]
    LPM_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    OTHER_FIELD_NUMBER: _ClassVar[int]
    field_id: int
    exact: FieldMatch.Exact
    ternary: FieldMatch.Ternary
    lpm: FieldMatch.LPM
    range: FieldMatch.Range
    optional: FieldMatch.Optional
    other: _any_pb2.Any
    def __init__(self, field_id: _Optional[int] = ..., exact: _Optional[_Union[FieldMatch.Exact, _Mapping]] = ..., ternary: _Optional[_Union[FieldMatch.Ternary, _Mapping]] = ..., lpm: _Optional[_Union[FieldMatch.LPM, _Mapping]] = ..., range: _Optional[_Union[FieldMatch.Range, _Mapping]] = ..., optional: _Optional[_Union[FieldMatch.Optional, _Mapping]] = ..., other: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...

class TableAction(_message.Message):
    __slots__ = ("action", "action_profile_member_id", "action_profile_group_id", "action_profile_action_set")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_PROFILE_MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_PROFILE_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_PROFILE_ACTION_SET_FIELD_NUMBER: _ClassVar[int]
    action: Action
    action_profile_member_id: int
    action_profile_group_id: int
    action_profile_action_set: ActionProfileActionSet
    def __init__(self, action: _Optional[_Union[Action, _Mapping]] = ..., action_profile_member_id: _Optional[int] = ..., action_profile_group_id: _Optional[int] = ..., action_profile_action_set: _Optional[_Union[ActionProfileActionSet, _Mapping]] = ...) -> None: ...

class Action(_message.Message):
    __slots__ = ("action_id", "params")
    class Param(_message.Message):
        __slots__ = ("param_id", "value")
        PARAM_ID_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        param_id: int
        value: bytes
        def __init__(self, param_id: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    action_id: int
    params: _containers.RepeatedCompositeFieldContainer[Action.Param]
    def __init__(self, action_id: _Optional[int] = ..., params: _Optional[_Iterable[_Union[Action.Param, _Mapping]]] = ...) -> None: ...

class ActionProfileActionSet(_message.Message):
    __slots__ = ("group_action", "action_profile_actions", "action_selection_mode", "size_semantics")
    class ActionSelectionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT_MODE_DETERMINED_BY_ACTION_SELECTOR: _ClassVar[ActionProfileActionSet.ActionSelectionMode]
        HASH: _ClassVar[ActionProfileActionSet.ActionSelectionMode]
        RANDOM: _ClassVar[ActionProfileActionSet.ActionSelectionMode]
    DEFAULT_MODE_DETERMINED_BY_ACTION_SELECTOR: ActionProfileActionSet.ActionSelectionMode
    HASH: ActionProfileActionSet.ActionSelectionMode
    RANDOM: ActionProfileActionSet.ActionSelectionMode
    class SizeSemantics(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT_SIZE_DETERMINED_BY_ACTION_SELECTOR: _ClassVar[ActionProfileActionSet.SizeSemantics]
        SUM_OF_WEIGHTS: _ClassVar[ActionProfileActionSet.SizeSemantics]
        SUM_OF_MEMBERS: _ClassVar[ActionProfileActionSet.SizeSemantics]
    DEFAULT_SIZE_DETERMINED_BY_ACTION_SELECTOR: ActionProfileActionSet.SizeSemantics
    SUM_OF_WEIGHTS: ActionProfileActionSet.SizeSemantics
    SUM_OF_MEMBERS: ActionProfileActionSet.SizeSemantics
    GROUP_ACTION_FIELD_NUMBER: _ClassVar[int]
    ACTION_PROFILE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    ACTION_SELECTION_MODE_FIELD_NUMBER: _ClassVar[int]
    SIZE_SEMANTICS_FIELD_NUMBER: _ClassVar[int]
    group_action: Action
    action_profile_actions: _containers.RepeatedCompositeFieldContainer[ActionProfileAction]
    action_selection_mode: ActionProfileActionSet.ActionSelectionMode
    size_semantics: ActionProfileActionSet.SizeSemantics
    def __init__(self, group_action: _Optional[_Union[Action, _Mapping]] = ..., action_profile_actions: _Optional[_Iterable[_Union[ActionProfileAction, _Mapping]]] = ..., action_selection_mode: _Optional[_Union[ActionProfileActionSet.ActionSelectionMode, str]] = ..., size_semantics: _Optional[_Union[ActionProfileActionSet.SizeSemantics, str]] = ...) -> None: ...

class ActionProfileAction(_message.Message):
    __slots__ = ("action", "weight", "watch", "watch_port")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    WATCH_FIELD_NUMBER: _ClassVar[int]
    WATCH_PORT_FIELD_NUMBER: _ClassVar[int]
    action: Action
    weight: int
    watch: int
    watch_port: bytes
    def __init__(self, action: _Optional[_Union[Action, _Mapping]] = ..., weight: _Optional[int] = ..., watch: _Optional[int] = ..., watch_port: _Optional[bytes] = ...) -> None: ...

class ActionProfileMember(_message.Message):
    __slots__ = ("action_profile_id", "member_id", "action")
    ACTION_PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action_profile_id: int
    member_id: int
    action: Action
    def __init__(self, action_profile_id: _Optional[int] = ..., member_id: _Optional[int] = ..., action: _Optional[_Union[Action, _Mapping]] = ...) -> None: ...

class ActionProfileGroup(_message.Message):
    __slots__ = ("action_profile_id", "group_id", "members", "max_size")
    class Member(_message.Message):
        __slots__ = ("member_id", "weight", "watch", "watch_port")
        MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
        WEIGHT_FIELD_NUMBER: _ClassVar[int]
        WATCH_FIELD_NUMBER: _ClassVar[int]
        WATCH_PORT_FIELD_NUMBER: _ClassVar[int]
        member_id: int
        weight: int
        watch: int
        watch_port: bytes
        def __init__(self, member_id: _Optional[int] = ..., weight: _Optional[int] = ..., watch: _Optional[int] = ..., watch_port: _Optional[bytes] = ...) -> None: ...
    ACTION_PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    action_profile_id: int
    group_id: int
    members: _containers.RepeatedCompositeFieldContainer[ActionProfileGroup.Member]
    max_size: int
    def __init__(self, action_profile_id: _Optional[int] = ..., group_id: _Optional[int] = ..., members: _Optional[_Iterable[_Union[ActionProfileGroup.Member, _Mapping]]] = ..., max_size: _Optional[int] = ...) -> None: ...

class Index(_message.Message):
    __slots__ = ("index",)
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class MeterEntry(_message.Message):
    __slots__ = ("meter_id", "index", "config", "counter_data")
    METER_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    COUNTER_DATA_FIELD_NUMBER: _ClassVar[int]
    meter_id: int
    index: Index
    config: MeterConfig
    counter_data: MeterCounterData
    def __init__(self, meter_id: _Optional[int] = ..., index: _Optional[_Union[Index, _Mapping]] = ..., config: _Optional[_Union[MeterConfig, _Mapping]] = ..., counter_data: _Optional[_Union[MeterCounterData, _Mapping]] = ...) -> None: ...

class DirectMeterEntry(_message.Message):
    __slots__ = ("table_entry", "config", "counter_data")
    TABLE_ENTRY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    COUNTER_DATA_FIELD_NUMBER: _ClassVar[int]
    table_entry: TableEntry
    config: MeterConfig
    counter_data: MeterCounterData
    def __init__(self, table_entry: _Optional[_Union[TableEntry, _Mapping]] = ..., config: _Optional[_Union[MeterConfig, _Mapping]] = ..., counter_data: _Optional[_Union[MeterCounterData, _Mapping]] = ...) -> None: ...

class MeterConfig(_message.Message):
    __slots__ = ("cir", "cburst", "pir", "pburst", "eburst")
    CIR_FIELD_NUMBER: _ClassVar[int]
    CBURST_FIELD_NUMBER: _ClassVar[int]
    PIR_FIELD_NUMBER: _ClassVar[int]
    PBURST_FIELD_NUMBER: _ClassVar[int]
    EBURST_FIELD_NUMBER: _ClassVar[int]
    cir: int
    cburst: int
    pir: int
    pburst: int
    eburst: int
    def __init__(self, cir: _Optional[int] = ..., cburst: _Optional[int] = ..., pir: _Optional[int] = ..., pburst: _Optional[int] = ..., eburst: _Optional[int] = ...) -> None: ...

class CounterEntry(_message.Message):
    __slots__ = ("counter_id", "index", "data")
    COUNTER_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    counter_id: int
    index: Index
    data: CounterData
    def __init__(self, counter_id: _Optional[int] = ..., index: _Optional[_Union[Index, _Mapping]] = ..., data: _Optional[_Union[CounterData, _Mapping]] = ...) -> None: ...

class DirectCounterEntry(_message.Message):
    __slots__ = ("table_entry", "data")
    TABLE_ENTRY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    table_entry: TableEntry
    data: CounterData
    def __init__(self, table_entry: _Optional[_Union[TableEntry, _Mapping]] = ..., data: _Optional[_Union[CounterData, _Mapping]] = ...) -> None: ...

class CounterData(_message.Message):
    __slots__ = ("byte_count", "packet_count")
    BYTE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PACKET_COUNT_FIELD_NUMBER: _ClassVar[int]
    byte_count: int
    packet_count: int
    def __init__(self, byte_count: _Optional[int] = ..., packet_count: _Optional[int] = ...) -> None: ...

class MeterCounterData(_message.Message):
    __slots__ = ("green", "yellow", "red")
    GREEN_FIELD_NUMBER: _ClassVar[int]
    YELLOW_FIELD_NUMBER: _ClassVar[int]
    RED_FIELD_NUMBER: _ClassVar[int]
    green: CounterData
    yellow: CounterData
    red: CounterData
    def __init__(self, green: _Optional[_Union[CounterData, _Mapping]] = ..., yellow: _Optional[_Union[CounterData, _Mapping]] = ..., red: _Optional[_Union[CounterData, _Mapping]] = ...) -> None: ...

class PacketReplicationEngineEntry(_message.Message):
    __slots__ = ("multicast_group_entry", "clone_session_entry")
    MULTICAST_GROUP_ENTRY_FIELD_NUMBER: _ClassVar[int]
    CLONE_SESSION_ENTRY_FIELD_NUMBER: _ClassVar[int]
    multicast_group_entry: MulticastGroupEntry
    clone_session_entry: CloneSessionEntry
    def __init__(self, multicast_group_entry: _Optional[_Union[MulticastGroupEntry, _Mapping]] = ..., clone_session_entry: _Optional[_Union[CloneSessionEntry, _Mapping]] = ...) -> None: ...

class BackupReplica(_message.Message):
    __slots__ = ("port", "instance")
    PORT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    port: bytes
    instance: int
    def __init__(self, port: _Optional[bytes] = ..., instance: _Optional[int] = ...) -> None: ...

class Replica(_message.Message):
    __slots__ = ("egress_port", "port", "instance", "backup_replicas")
    EGRESS_PORT_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    BACKUP_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    egress_port: int
    port: bytes
    instance: int
    backup_replicas: _containers.RepeatedCompositeFieldContainer[BackupReplica]
    def __init__(self, egress_port: _Optional[int] = ..., port: _Optional[bytes] = ..., instance: _Optional[int] = ..., backup_replicas: _Optional[_Iterable[_Union[BackupReplica, _Mapping]]] = ...) -> None: ...

class MulticastGroupEntry(_message.Message):
    __slots__ = ("multicast_group_id", "replicas", "metadata")
    MULTICAST_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    multicast_group_id: int
    replicas: _containers.RepeatedCompositeFieldContainer[Replica]
    metadata: bytes
    def __init__(self, multicast_group_id: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[Replica, _Mapping]]] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class CloneSessionEntry(_message.Message):
    __slots__ = ("session_id", "replicas", "class_of_service", "packet_length_bytes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CLASS_OF_SERVICE_FIELD_NUMBER: _ClassVar[int]
    PACKET_LENGTH_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    replicas: _containers.RepeatedCompositeFieldContainer[Replica]
    class_of_service: int
    packet_length_bytes: int
    def __init__(self, session_id: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[Replica, _Mapping]]] = ..., class_of_service: _Optional[int] = ..., packet_length_bytes: _Optional[int] = ...) -> None: ...

class ValueSetMember(_message.Message):
    __slots__ = ("match",)
    MATCH_FIELD_NUMBER: _ClassVar[int]
    match: _containers.RepeatedCompositeFieldContainer[FieldMatch]
    def __init__(self, match: _Optional[_Iterable[_Union[FieldMatch, _Mapping]]] = ...) -> None: ...

class ValueSetEntry(_message.Message):
    __slots__ = ("value_set_id", "members")
    VALUE_SET_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    value_set_id: int
    members: _containers.RepeatedCompositeFieldContainer[ValueSetMember]
    def __init__(self, value_set_id: _Optional[int] = ..., members: _Optional[_Iterable[_Union[ValueSetMember, _Mapping]]] = ...) -> None: ...

class RegisterEntry(_message.Message):
    __slots__ = ("register_id", "index", "data")
    REGISTER_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    register_id: int
    index: Index
    data: _p4data_pb2.P4Data
    def __init__(self, register_id: _Optional[int] = ..., index: _Optional[_Union[Index, _Mapping]] = ..., data: _Optional[_Union[_p4data_pb2.P4Data, _Mapping]] = ...) -> None: ...

class DigestEntry(_message.Message):
    __slots__ = ("digest_id", "config")
    class Config(_message.Message):
        __slots__ = ("max_timeout_ns", "max_list_size", "ack_timeout_ns")
        MAX_TIMEOUT_NS_FIELD_NUMBER: _ClassVar[int]
        MAX_LIST_SIZE_FIELD_NUMBER: _ClassVar[int]
        ACK_TIMEOUT_NS_FIELD_NUMBER: _ClassVar[int]
        max_timeout_ns: int
        max_list_size: int
        ack_timeout_ns: int
        def __init__(self, max_timeout_ns: _Optional[int] = ..., max_list_size: _Optional[int] = ..., ack_timeout_ns: _Optional[int] = ...) -> None: ...
    DIGEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    digest_id: int
    config: DigestEntry.Config
    def __init__(self, digest_id: _Optional[int] = ..., config: _Optional[_Union[DigestEntry.Config, _Mapping]] = ...) -> None: ...

class StreamMessageRequest(_message.Message):
    __slots__ = ("arbitration", "packet", "digest_ack", "other")
    ARBITRATION_FIELD_NUMBER: _ClassVar[int]
    PACKET_FIELD_NUMBER: _ClassVar[int]
    DIGEST_ACK_FIELD_NUMBER: _ClassVar[int]
    OTHER_FIELD_NUMBER: _ClassVar[int]
    arbitration: MasterArbitrationUpdate
    packet: PacketOut
    digest_ack: DigestListAck
    other: _any_pb2.Any
    def __init__(self, arbitration: _Optional[_Union[MasterArbitrationUpdate, _Mapping]] = ..., packet: _Optional[_Union[PacketOut, _Mapping]] = ..., digest_ack: _Optional[_Union[DigestListAck, _Mapping]] = ..., other: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...

class PacketOut(_message.Message):
    __slots__ = ("payload", "metadata")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    metadata: _containers.RepeatedCompositeFieldContainer[PacketMetadata]
    def __init__(self, payload: _Optional[bytes] = ..., metadata: _Optional[_Iterable[_Union[PacketMetadata, _Mapping]]] = ...) -> None: ...

class DigestListAck(_message.Message):
    __slots__ = ("digest_id", "list_id")
    DIGEST_ID_FIELD_NUMBER: _ClassVar[int]
    LIST_ID_FIELD_NUMBER: _ClassVar[int]
    digest_id: int
    list_id: int
    def __init__(self, digest_id: _Optional[int] = ..., list_id: _Optional[int] = ...) -> None: ...

class StreamMessageResponse(_message.Message):
    __slots__ = ("arbitration", "packet", "digest", "idle_timeout_notification", "other", "error")
    ARBITRATION_FIELD_NUMBER: _ClassVar[int]
    PACKET_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_NOTIFICATION_FIELD_NUMBER: _ClassVar[int]
    OTHER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    arbitration: MasterArbitrationUpdate
    packet: PacketIn
    digest: DigestList
    idle_timeout_notification: IdleTimeoutNotification
    other: _any_pb2.Any
    error: StreamError
    def __init__(self, arbitration: _Optional[_Union[MasterArbitrationUpdate, _Mapping]] = ..., packet: _Optional[_Union[PacketIn, _Mapping]] = ..., digest: _Optional[_Union[DigestList, _Mapping]] = ..., idle_timeout_notification: _Optional[_Union[IdleTimeoutNotification, _Mapping]] = ..., other: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., error: _Optional[_Union[StreamError, _Mapping]] = ...) -> None: ...

class PacketIn(_message.Message):
    __slots__ = ("payload", "metadata")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    metadata: _containers.RepeatedCompositeFieldContainer[PacketMetadata]
    def __init__(self, payload: _Optional[bytes] = ..., metadata: _Optional[_Iterable[_Union[PacketMetadata, _Mapping]]] = ...) -> None: ...

class DigestList(_message.Message):
    __slots__ = ("digest_id", "list_id", "data", "timestamp")
    DIGEST_ID_FIELD_NUMBER: _ClassVar[int]
    LIST_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    digest_id: int
    list_id: int
    data: _containers.RepeatedCompositeFieldContainer[_p4data_pb2.P4Data]
    timestamp: int
    def __init__(self, digest_id: _Optional[int] = ..., list_id: _Optional[int] = ..., data: _Optional[_Iterable[_Union[_p4data_pb2.P4Data, _Mapping]]] = ..., timestamp: _Optional[int] = ...) -> None: ...

class PacketMetadata(_message.Message):
    __slots__ = ("metadata_id", "value")
    METADATA_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    metadata_id: int
    value: bytes
    def __init__(self, metadata_id: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class MasterArbitrationUpdate(_message.Message):
    __slots__ = ("device_id", "role", "election_id", "status")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ELECTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    role: Role
    election_id: Uint128
    status: _status_pb2.Status
    def __init__(self, device_id: _Optional[int] = ..., role: _Optional[_Union[Role, _Mapping]] = ..., election_id: _Optional[_Union[Uint128, _Mapping]] = ..., status: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class Role(_message.Message):
    __slots__ = ("id", "name", "config")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    config: _any_pb2.Any
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., config: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...

class IdleTimeoutNotification(_message.Message):
    __slots__ = ("table_entry", "timestamp")
    TABLE_ENTRY_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    table_entry: _containers.RepeatedCompositeFieldContainer[TableEntry]
    timestamp: int
    def __init__(self, table_entry: _Optional[_Iterable[_Union[TableEntry, _Mapping]]] = ..., timestamp: _Optional[int] = ...) -> None: ...

class StreamError(_message.Message):
    __slots__ = ("canonical_code", "message", "space", "code", "packet_out", "digest_list_ack", "other")
    CANONICAL_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    PACKET_OUT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_LIST_ACK_FIELD_NUMBER: _ClassVar[int]
    OTHER_FIELD_NUMBER: _ClassVar[int]
    canonical_code: int
    message: str
    space: str
    code: int
    packet_out: PacketOutError
    digest_list_ack: DigestListAckError
    other: StreamOtherError
    def __init__(self, canonical_code: _Optional[int] = ..., message: _Optional[str] = ..., space: _Optional[str] = ..., code: _Optional[int] = ..., packet_out: _Optional[_Union[PacketOutError, _Mapping]] = ..., digest_list_ack: _Optional[_Union[DigestListAckError, _Mapping]] = ..., other: _Optional[_Union[StreamOtherError, _Mapping]] = ...) -> None: ...

class PacketOutError(_message.Message):
    __slots__ = ("packet_out",)
    PACKET_OUT_FIELD_NUMBER: _ClassVar[int]
    packet_out: PacketOut
    def __init__(self, packet_out: _Optional[_Union[PacketOut, _Mapping]] = ...) -> None: ...

class DigestListAckError(_message.Message):
    __slots__ = ("digest_list_ack",)
    DIGEST_LIST_ACK_FIELD_NUMBER: _ClassVar[int]
    digest_list_ack: DigestListAck
    def __init__(self, digest_list_ack: _Optional[_Union[DigestListAck, _Mapping]] = ...) -> None: ...

class StreamOtherError(_message.Message):
    __slots__ = ("other",)
    OTHER_FIELD_NUMBER: _ClassVar[int]
    other: _any_pb2.Any
    def __init__(self, other: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...

class Uint128(_message.Message):
    __slots__ = ("high", "low")
    HIGH_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    high: int
    low: int
    def __init__(self, high: _Optional[int] = ..., low: _Optional[int] = ...) -> None: ...

class SetForwardingPipelineConfigRequest(_message.Message):
    __slots__ = ("device_id", "role_id", "role", "election_id", "action", "config")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[SetForwardingPipelineConfigRequest.Action]
        VERIFY: _ClassVar[SetForwardingPipelineConfigRequest.Action]
        VERIFY_AND_SAVE: _ClassVar[SetForwardingPipelineConfigRequest.Action]
        VERIFY_AND_COMMIT: _ClassVar[SetForwardingPipelineConfigRequest.Action]
        COMMIT: _ClassVar[SetForwardingPipelineConfigRequest.Action]
        RECONCILE_AND_COMMIT: _ClassVar[SetForwardingPipelineConfigRequest.Action]
    UNSPECIFIED: SetForwardingPipelineConfigRequest.Action
    VERIFY: SetForwardingPipelineConfigRequest.Action
    VERIFY_AND_SAVE: SetForwardingPipelineConfigRequest.Action
    VERIFY_AND_COMMIT: SetForwardingPipelineConfigRequest.Action
    COMMIT: SetForwardingPipelineConfigRequest.Action
    RECONCILE_AND_COMMIT: SetForwardingPipelineConfigRequest.Action
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ELECTION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    role_id: int
    role: str
    election_id: Uint128
    action: SetForwardingPipelineConfigRequest.Action
    config: ForwardingPipelineConfig
    def __init__(self, device_id: _Optional[int] = ..., role_id: _Optional[int] = ..., role: _Optional[str] = ..., election_id: _Optional[_Union[Uint128, _Mapping]] = ..., action: _Optional[_Union[SetForwardingPipelineConfigRequest.Action, str]] = ..., config: _Optional[_Union[ForwardingPipelineConfig, _Mapping]] = ...) -> None: ...

class SetForwardingPipelineConfigResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ForwardingPipelineConfig(_message.Message):
    __slots__ = ("p4info", "p4_device_config", "cookie")
    class Cookie(_message.Message):
        __slots__ = ("cookie",)
        COOKIE_FIELD_NUMBER: _ClassVar[int]
        cookie: int
        def __init__(self, cookie: _Optional[int] = ...) -> None: ...
    P4INFO_FIELD_NUMBER: _ClassVar[int]
    P4_DEVICE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    COOKIE_FIELD_NUMBER: _ClassVar[int]
    p4info: _p4info_pb2.P4Info
    p4_device_config: bytes
    cookie: ForwardingPipelineConfig.Cookie
    def __init__(self, p4info: _Optional[_Union[_p4info_pb2.P4Info, _Mapping]] = ..., p4_device_config: _Optional[bytes] = ..., cookie: _Optional[_Union[ForwardingPipelineConfig.Cookie, _Mapping]] = ...) -> None: ...

class GetForwardingPipelineConfigRequest(_message.Message):
    __slots__ = ("device_id", "response_type")
    class ResponseType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ALL: _ClassVar[GetForwardingPipelineConfigRequest.ResponseType]
        COOKIE_ONLY: _ClassVar[GetForwardingPipelineConfigRequest.ResponseType]
        P4INFO_AND_COOKIE: _ClassVar[GetForwardingPipelineConfigRequest.ResponseType]
        DEVICE_CONFIG_AND_COOKIE: _ClassVar[GetForwardingPipelineConfigRequest.ResponseType]
    ALL: GetForwardingPipelineConfigRequest.ResponseType
    COOKIE_ONLY: GetForwardingPipelineConfigRequest.ResponseType
    P4INFO_AND_COOKIE: GetForwardingPipelineConfigRequest.ResponseType
    DEVICE_CONFIG_AND_COOKIE: GetForwardingPipelineConfigRequest.ResponseType
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_TYPE_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    response_type: GetForwardingPipelineConfigRequest.ResponseType
    def __init__(self, device_id: _Optional[int] = ..., response_type: _Optional[_Union[GetForwardingPipelineConfigRequest.ResponseType, str]] = ...) -> None: ...

class GetForwardingPipelineConfigResponse(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: ForwardingPipelineConfig
    def __init__(self, config: _Optional[_Union[ForwardingPipelineConfig, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("canonical_code", "message", "space", "code", "details")
    CANONICAL_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    canonical_code: int
    message: str
    space: str
    code: int
    details: _any_pb2.Any
    def __init__(self, canonical_code: _Optional[int] = ..., message: _Optional[str] = ..., space: _Optional[str] = ..., code: _Optional[int] = ..., details: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...

class CapabilitiesRequest(_message.Message):
    __slots__ = ("device_id",)
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    def __init__(self, device_id: _Optional[int] = ...) -> None: ...

class CapabilitiesResponse(_message.Message):
    __slots__ = ("p4runtime_api_version", "experimental")
    P4RUNTIME_API_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENTAL_FIELD_NUMBER: _ClassVar[int]
    p4runtime_api_version: str
    experimental: _any_pb2.Any
    def __init__(self, p4runtime_api_version: _Optional[str] = ..., experimental: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...
