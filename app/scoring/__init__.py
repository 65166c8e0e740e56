"""Scoring: model contract, ONNX scorer, registry, decision policy, training and the oracle."""
