"""Builds trionsq's one C extension, `trionsq.protocol._speedups` (the parser's per-message
loops: MPUB framing and FIN scanning; see trionsq/protocol/_speedups.c); everything else about
the package is in pyproject.toml.

The extension is optional: where it cannot be compiled, trionsq installs and runs its pure
Python loops instead (`trionsq.protocol.parser.COMPILED_FRAME_MPUB` is then None)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trionsq.protocol._speedups",
            ["trionsq/protocol/_speedups.c"],
            optional=True,
        )
    ]
)
