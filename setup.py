"""Builds trionsq's two C extensions; everything else about the package is in pyproject.toml.

* `trionsq.protocol._speedups`: the parser's per-message loops (MPUB framing and FIN
  scanning) and CRC-32C (trionsq/protocol/_speedups.c);
* `trionsq.nsqd.replication._log_loops`: the replication log's per-message loops (encoding
  records, counting them, scanning their IDs: trionsq/nsqd/replication/_log_loops.c).

Both compile the one CRC-32C implementation of trionsq/protocol/crc32c_impl.h (the SSE4.2
instruction where the CPU has it, a table otherwise), a dependency of each (`depends`: a
change rebuilds them; MANIFEST.in puts it in the sdist).

The extensions are optional: where they cannot be compiled, trionsq installs and runs its pure
Python loops instead (`trionsq.protocol.parser.COMPILED_FRAME_MPUB` and
`trionsq.nsqd.replication.log.COMPILED_ENCODE_FRAMES` are then None)."""

from setuptools import Extension, setup

_CRC32C = ["trionsq/protocol/crc32c_impl.h"]

setup(
    ext_modules=[
        Extension(
            "trionsq.protocol._speedups",
            ["trionsq/protocol/_speedups.c"],
            depends=_CRC32C,
            optional=True,
        ),
        Extension(
            "trionsq.nsqd.replication._log_loops",
            ["trionsq/nsqd/replication/_log_loops.c"],
            depends=_CRC32C,
            optional=True,
        ),
    ]
)
