"""The compiled parts of fraudstream: the offline feature fold, the online card state, Kafka's
default partitioner, the served rows' JSON and the transaction contract's string rules
(everything else is pyproject.toml)."""

from setuptools import Extension, setup

FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
         "-Wno-missing-field-initializers", "-Wno-cast-function-type"]

setup(
    ext_modules=[
        Extension("app.features._fold", sources=["app/features/_fold.c"], extra_compile_args=FLAGS),
        Extension("app.features._state", sources=["app/features/_state.c"], extra_compile_args=FLAGS),
        Extension("app.kafka._partition", sources=["app/kafka/_partition.c"],
                  extra_compile_args=FLAGS),
        Extension("app.stream.engine._served", sources=["app/stream/engine/_served.c"],
                  include_dirs=["app/_vendor/msgspec"],
                  depends=[f"app/_vendor/msgspec/{h}" for h in ("common.h", "itoa.h", "ryu.h")],
                  extra_compile_args=FLAGS),
        Extension("app.transactions._contract", sources=["app/transactions/_contract.c"],
                  extra_compile_args=FLAGS),
    ],
)
