"""Synthetic transaction logs with labelled fraud, and the corpus of bad messages."""

from app.datagen.config import GeneratorConfig, parse_time_ms
from app.datagen.generator import generate_log
from app.datagen.log import GeneratedLog, Label, LogCounts

__all__ = ["GeneratedLog", "GeneratorConfig", "Label", "LogCounts", "generate_log", "parse_time_ms"]
