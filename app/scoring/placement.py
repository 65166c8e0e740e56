"""Which of a model's nodes onnxruntime can run on CUDA: the ai.onnx.ml operators cannot.

onnxruntime implements the classic-ML operators (TreeEnsembleClassifier, the gradient-boosted
trees' node, and the rest of the ai.onnx.ml domain) on the CPU only. A CUDA session of such a
model still reports CUDA as its provider while the trees run on the CPU, with a copy to and from
the device around them: slower than the CPU session at every batch size, and refused by CUDA
graphs. `cpu_only_ops` finds those nodes in the model's bytes, so that `hybrid.build_scorer`
scores such a model on the CPU from the start (and says why) instead of binding device buffers,
calibrating and picking "never".

The model is read as protobuf wire format (ModelProto.graph → GraphProto.node → NodeProto
op_type / domain) rather than with the `onnx` package, which the worker does not depend on; a
test holds it to `onnx`'s own parse of the shipped models.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

#: The operator domain onnxruntime's CUDA provider has no kernels for.
ML_DOMAIN: Final = "ai.onnx.ml"

# Field numbers of onnx.proto3 (ModelProto.graph, GraphProto.node, NodeProto.op_type/.domain).
_MODEL_GRAPH: Final = 7
_GRAPH_NODE: Final = 1
_NODE_OP_TYPE: Final = 4
_NODE_DOMAIN: Final = 7


def cpu_only_ops(model: bytes) -> tuple[str, ...]:
    """The op types of the model's top-level nodes that onnxruntime runs on the CPU only, sorted,
    once each; () when every node can run on CUDA."""
    ops = set()
    for graph in _fields(model, _MODEL_GRAPH):
        for node in _fields(graph, _GRAPH_NODE):
            op_type = domain = b""
            for number, value in _wire(node):
                if number == _NODE_OP_TYPE:
                    op_type = value
                elif number == _NODE_DOMAIN:
                    domain = value
            if domain.decode() == ML_DOMAIN:
                ops.add(op_type.decode())
    return tuple(sorted(ops))


def _fields(message: bytes, number: int) -> Iterator[bytes]:
    """The length-delimited values of field `number` in a message."""
    return (value for n, value in _wire(message) if n == number)


def _wire(message: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, bytes) of every length-delimited field; other wire types are skipped."""
    view = memoryview(message)
    pos, end = 0, len(message)
    while pos < end:
        key, pos = _varint(view, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos = _varint(view, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            length, pos = _varint(view, pos)
            if pos + length > end:
                raise ValueError("not an ONNX model: a field runs past the end of the bytes")
            yield number, bytes(view[pos:pos + length])
            pos += length
        else:
            raise ValueError(f"not an ONNX model: wire type {wire_type} at byte {pos}")
    if pos != end:
        raise ValueError("not an ONNX model: the last field runs past the end of the bytes")


def _varint(view: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(view) or shift > 63:
            raise ValueError("not an ONNX model: a truncated or overlong varint")
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
