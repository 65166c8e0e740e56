"""The compiled parts of fraudstream: the offline feature fold, the online card state and Kafka's
default partitioner (everything else is pyproject.toml)."""

from setuptools import Extension, setup

FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
         "-Wno-missing-field-initializers", "-Wno-cast-function-type"]

setup(
    ext_modules=[
        Extension("app.features._fold", sources=["app/features/_fold.c"], extra_compile_args=FLAGS),
        Extension("app.features._state", sources=["app/features/_state.c"], extra_compile_args=FLAGS),
        Extension("app.kafka._partition", sources=["app/kafka/_partition.c"],
                  extra_compile_args=FLAGS),
    ],
)
