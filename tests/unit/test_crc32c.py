"""CRC-32C: the compiled and Python functions agree with the standard check value and with
each other, in one call and continued over pieces."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol.crc32c import COMPILED_CRC32C, crc32c_python

FUNCTIONS = [crc32c_python] + ([COMPILED_CRC32C] if COMPILED_CRC32C is not None else [])


@pytest.mark.parametrize("crc32c", FUNCTIONS)
def test_check_values(crc32c) -> None:  # type: ignore[no-untyped-def]
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros
    assert crc32c(b"\xff" * 32) == 0x62A8AB43  # and of ones


@given(st.binary(max_size=5000), st.integers(0, 5000))
def test_compiled_agrees_and_continues(data: bytes, cut: int) -> None:
    whole = crc32c_python(data)
    assert crc32c_python(data[cut:], crc32c_python(data[:cut])) == whole
    if COMPILED_CRC32C is not None:
        assert COMPILED_CRC32C(data) == whole
        assert COMPILED_CRC32C(memoryview(data)[cut:], COMPILED_CRC32C(data[:cut])) == whole
