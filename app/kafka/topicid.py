"""Kafka topic ids: the Metadata request versions (10-12) that carry them, which aiokafka lacks.

A topic's id is a UUID the controller gives it when it is created (Kafka ≥ 2.8, KIP-516): a
topic deleted and created again under the same name gets a new one, where its name, partition
count and offsets may all look the same. aiokafka speaks Metadata up to v5 only (no ids), so
this module declares v10-v12 with aiokafka's own protocol types and sends it with its client.
"""

from __future__ import annotations

import base64
from io import BytesIO
from typing import Any

from aiokafka.errors import for_code
from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

#: The id Kafka gives no topic (its "none").
ZERO_UUID = bytes(16)


class Uuid(AbstractType[bytes]):
    """Kafka's uuid type: 16 raw bytes."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        if len(value) != 16:
            raise ValueError(f"a uuid is 16 bytes, not {len(value)}")
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        value = data.read(16)
        if len(value) != 16:
            raise ValueError("Buffer underrun decoding uuid")
        return value


def _response_schema(cluster_operations: bool) -> Schema:
    fields: list[tuple[str, Any]] = [
        ("throttle_time_ms", Int32),
        ("brokers", CompactArray(("node_id", Int32), ("host", CompactString("utf-8")),
                                 ("port", Int32), ("rack", CompactString("utf-8")),
                                 ("tags", TaggedFields))),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        ("topics", CompactArray(
            ("error_code", Int16), ("name", CompactString("utf-8")), ("topic_id", Uuid),
            ("is_internal", Boolean),
            ("partitions", CompactArray(
                ("error_code", Int16), ("partition_index", Int32), ("leader_id", Int32),
                ("leader_epoch", Int32), ("replica_nodes", CompactArray(Int32)),
                ("isr_nodes", CompactArray(Int32)), ("offline_replicas", CompactArray(Int32)),
                ("tags", TaggedFields))),
            ("topic_authorized_operations", Int32), ("tags", TaggedFields)))]
    if cluster_operations:
        fields.append(("cluster_authorized_operations", Int32))
    fields.append(("tags", TaggedFields))
    return Schema(*fields)


def _request_schema(cluster_operations: bool) -> Schema:
    fields: list[tuple[str, Any]] = [
        ("topics", CompactArray(("topic_id", Uuid), ("name", CompactString("utf-8")),
                                ("tags", TaggedFields))),
        ("allow_auto_topic_creation", Boolean)]
    if cluster_operations:
        fields.append(("include_cluster_authorized_operations", Boolean))
    fields += [("include_topic_authorized_operations", Boolean), ("tags", TaggedFields)]
    return Schema(*fields)


class MetadataResponse_v10(Response):  # noqa: N801 - aiokafka's naming of versions
    API_KEY = 3
    API_VERSION = 10
    SCHEMA = _response_schema(cluster_operations=True)


class MetadataResponse_v11(MetadataResponse_v10):  # noqa: N801
    API_VERSION = 11
    SCHEMA = _response_schema(cluster_operations=False)


class MetadataResponse_v12(MetadataResponse_v11):  # noqa: N801 - v12: a topic's name may be null
    API_VERSION = 12


class MetadataRequest_v10(RequestStruct):  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 10
    RESPONSE_TYPE = MetadataResponse_v10
    SCHEMA = _request_schema(cluster_operations=True)


class MetadataRequest_v11(MetadataRequest_v10):  # noqa: N801
    API_VERSION = 11
    RESPONSE_TYPE = MetadataResponse_v11
    SCHEMA = _request_schema(cluster_operations=False)


class MetadataRequest_v12(MetadataRequest_v11):  # noqa: N801 - the same request as v11
    API_VERSION = 12
    RESPONSE_TYPE = MetadataResponse_v12


class TopicIdRequest(Request[MetadataRequest_v10 | MetadataRequest_v11 | MetadataRequest_v12]):
    """A Metadata request (v10-v12, the highest the broker speaks) for `topics` by name, never
    creating one. A broker below v10 (Kafka < 2.8) makes aiokafka raise NotImplementedError."""

    API_KEY = 3

    def __init__(self, topics: list[str]) -> None:
        self.topics = topics

    def build(self, request_struct_class: type[Any]) -> Any:
        topics = [(ZERO_UUID, name, {}) for name in self.topics]
        if request_struct_class.API_VERSION == 10:
            return request_struct_class(topics, False, False, False, {})
        return request_struct_class(topics, False, False, {})


def format_id(raw: bytes) -> str | None:
    """A topic id as Kafka prints it (`kafka-topics --describe`: url-safe base64, unpadded);
    None for the zero id (no topic)."""
    if raw == ZERO_UUID:
        return None
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def topic_ids_of(response: Any) -> dict[str, str | None]:
    """Topic name → its id in a Metadata v10+ response; None for a topic the broker reported
    with an error (UnknownTopicOrPartition: it does not exist) or without an id."""
    ids: dict[str, str | None] = {}
    for error_code, name, raw_id, *_ in response.topics:
        if name is not None:
            ids[name] = format_id(raw_id) if error_code == 0 else None
    return ids


async def topic_ids(client: Any, topics: list[str]) -> dict[str, str | None]:
    """Ask one broker, through a bootstrapped aiokafka client, for the ids of `topics`
    (see `topic_ids_of`). Raises what aiokafka raises (NotImplementedError below Kafka 2.8)."""
    node = client.get_random_node()
    response = await client.send(node, TopicIdRequest(topics))
    for error_code, name, *_ in response.topics:
        error = for_code(error_code)
        if error_code not in (0, 3):  # 3: UnknownTopicOrPartition, reported as None
            raise error(f"metadata of {name}")
    return topic_ids_of(response)
