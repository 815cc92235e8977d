"""The replication connections' security (docs/replication.md section 6): TLS between members
when they have --tls-cert (no downgrade to plaintext), and the challenge that stops a
recorded IDENTIFY from being replayed by someone who lacks the shared secret."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import pytest
import trio
import trustme

from tests.integration.test_replication import SECRET, Cluster, publish
from trionsq.nsqd.replication import wire as wire
from trionsq.protocol import MAGIC_V2, identify


def _with_tls(cluster: Cluster, index: int, ca: trustme.CA, tmp_path: Path) -> None:
    cert = ca.issue_cert("127.0.0.1")
    cert_path = tmp_path / f"n{index + 1}-cert.pem"
    key_path = tmp_path / f"n{index + 1}-key.pem"
    ca_path = tmp_path / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    ca.cert_pem.write_to_path(str(ca_path))
    cluster.options[index] = dataclasses.replace(
        cluster.options[index],
        tls_cert=str(cert_path),
        tls_key=str(key_path),
        tls_root_ca_file=str(ca_path),
        https_address="",
    )


async def test_members_with_tls_replicate_over_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, size=2)
        for index in range(2):
            _with_tls(cluster, index, ca, tmp_path)
        await cluster.start_all()
        n1 = cluster.nodes[0]
        assert n1 is not None
        assert await publish(n1, "rt", [b"a", b"b"]) == [b"a", b"b"]
        n2 = cluster.nodes[1]
        assert n2 is not None
        await cluster.until(lambda: len(n2.topics["rt"].replica.log) == 2)
        # A publish to the replica is forwarded to the primary over TLS.
        assert await publish(n2, "rt", [b"c"]) == [b"c"]
        assert len(n1.topics["rt"].replica.log) == 3
        for node in cluster.live():
            peer = node.replication.peers[0]
            assert peer.connected and peer.tls
        cluster.stop()


@pytest.mark.parametrize("plaintext_node", [0, 1])
async def test_a_member_with_tls_never_talks_plaintext(tmp_path: Path, plaintext_node: int) -> None:
    ca = trustme.CA()
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, size=2)
        _with_tls(cluster, 1 - plaintext_node, ca, tmp_path)
        await cluster.start(0)
        await cluster.start(1)
        await trio.sleep(0.5)
        plain = cluster.nodes[plaintext_node]
        tls = cluster.nodes[1 - plaintext_node]
        assert plain is not None and tls is not None
        assert not plain.replication.peers[0].connected
        assert not tls.replication.peers[0].connected
        assert "requires TLS" in plain.replication.peers[0].error
        assert "did not agree to TLS" in tls.replication.peers[0].error
        cluster.stop()


async def _dial(
    address: str, key: dict[str, object]
) -> tuple[trio.SocketStream, dict[str, object]]:
    host, port = address.split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    body = {"feature_negotiation": True, "heartbeat_interval": -1, "replication": key}
    await stream.send_all(MAGIC_V2 + identify(body))
    data = b""
    while len(data) < 8 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = await stream.receive_some(65536)
        assert chunk, "closed during IDENTIFY"
        data += chunk
    size, frame_type = struct.unpack(">Ii", data[:8])
    assert frame_type == 0
    return stream, json.loads(data[8 : 4 + size])


async def _closed(stream: trio.SocketStream) -> bool:
    with trio.move_on_after(3):
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


@pytest.mark.parametrize("first_frame", ["replayed", "wrong proof", "right proof"])
async def test_a_replayed_identify_is_served_nothing(tmp_path: Path, first_frame: str) -> None:
    """Someone who recorded a member's IDENTIFY (its nonce and HMAC) can send it again, but
    cannot answer the new challenge: the connection closes before any request is served."""
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, tmp_path, size=2)
        await cluster.start(0)
        n1 = cluster.nodes[0]
        assert n1 is not None
        recorded = wire.identify_key(SECRET, 2)  # as node 2 sent it once
        stream, reply = await _dial(cluster.addresses[0], recorded)
        raw = reply["replication"]
        assert isinstance(raw, dict) and "challenge" in raw
        if first_frame == "right proof":
            _, proof = wire.check_reply_key(SECRET, recorded, raw, 2)
        elif first_frame == "wrong proof":
            proof = wire.encode(wire.PROOF, {"hmac": "0" * 64})
        else:
            proof = b""
        # A request that creates the topic on a member that serves it.
        request = wire.encode(wire.HEARTBEAT, {"topic": "rt", "epoch": 5 * 1024 + 2, "sent": 0})
        await stream.send_all(proof + request)
        if first_frame == "right proof":
            reader = wire.FrameReader(stream)
            with trio.fail_after(3):
                kind, header, _ = await reader.next()
            assert kind == wire.HEARTBEAT_ACK and header["topic"] == "rt"
        else:
            assert await _closed(stream)
            assert "rt" not in n1.topics
        await stream.aclose()
        cluster.stop()
