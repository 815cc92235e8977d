"""nsqadmin's request-side pieces without sockets: index rendering, static lookup, ACL, the
/config CIDR check, notification payloads and queue, JSON body decoding, warning messages."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import trio

from trionsq.nsqadmin.access import config_allowed, is_admin
from trionsq.nsqadmin.cluster import Report
from trionsq.nsqadmin.http_api import decode_go_json_body, go_query_error
from trionsq.nsqadmin.index import (
    base_prefix,
    content_type,
    find_static,
    index_config,
    render_index,
    script_json,
)
from trionsq.nsqadmin.notify import Notifier, admin_action, basic_auth_user
from trionsq.nsqadmin.upstream import UpstreamError


def _config(**overrides: object) -> dict[str, object]:
    values: dict[str, object] = dict(
        version="1.3.0",
        base="/admin",
        is_admin=True,
        lookupd=["a:4161"],
        nsqd=[],
        graphite_url="",
        proxy_graphite=False,
        statsd_interval=60.0,
        statsd_prefix="nsq.%s",
        statsd_counter_format="stats.counters.%s.count",
        statsd_gauge_format="stats.gauges.%s",
        acl_http_header="X-Forwarded-User",
    )
    values.update(overrides)
    return index_config(**values)  # type: ignore[arg-type]


def test_render_index_substitutes_both_placeholders() -> None:
    template = (
        '<link href="{{BASE_PATH}}/static/a.css"><script>var C = {{NSQADMIN_CONFIG}};</script>'
        '<a href="{{BASE_PATH}}/topics">'
    )
    html = render_index(template, "/admin", _config())
    assert '<link href="/admin/static/a.css">' in html
    assert '<a href="/admin/topics">' in html
    start = html.index("var C = ") + len("var C = ")
    config = json.loads(html[start : html.index(";</script>")])
    assert config == {
        "version": "1.3.0",
        "basePath": "/admin",
        "isAdmin": True,
        "nsqlookupd": ["a:4161"],
        "nsqdAddresses": [],
        "graphEnabled": False,
        "statsdInterval": 60,
        "graphiteUrl": "",
        "proxyGraphite": False,
        "statsdPrefix": "nsq.%s",
        "statsdCounterFormat": "stats.counters.%s.count",
        "statsdGaugeFormat": "stats.gauges.%s",
        "aclHttpHeader": "X-Forwarded-User",
    }


def test_config_json_cannot_close_the_script() -> None:
    hostile = "</script><script>alert(1)</script>&\u2028"
    html = render_index("<script>x={{NSQADMIN_CONFIG}}</script>", "", _config(lookupd=[hostile]))
    assert html.count("</script>") == 1
    assert "\\u003c/script\\u003e" in html and "\\u0026" in html and "\\u2028" in html
    inner = html[len("<script>x=") : -len("</script>")]
    assert json.loads(inner)["nsqlookupd"] == [hostile]
    assert script_json({"a": "<>&"}) == '{"a":"\\u003c\\u003e\\u0026"}'


def test_config_text_is_not_rescanned_for_base_path() -> None:
    html = render_index("{{NSQADMIN_CONFIG}}", "/b", _config(lookupd=["{{BASE_PATH}}"]))
    assert "{{BASE_PATH}}" in html


def test_graph_enabled_and_base_prefix() -> None:
    assert _config(graphite_url="http://g")["graphEnabled"] is True
    assert base_prefix("/") == "" and base_prefix("/admin") == "/admin"


def test_find_static_stays_inside(tmp_path: Path) -> None:
    static = tmp_path / "static"
    (static / "js").mkdir(parents=True)
    (static / "js" / "app.js").write_text("x")
    (tmp_path / "secret.txt").write_text("s")
    (static / "link").symlink_to(tmp_path / "secret.txt")
    assert find_static(static, "js/app.js") == (static / "js" / "app.js").resolve()
    for bad in ("../secret.txt", "js/../../secret.txt", "/etc/passwd", "", "js", "link",
                "js//app.js", "missing.js", "..\\secret.txt"):  # fmt: skip
        assert find_static(static, bad) is None, bad


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("app.js", "text/javascript; charset=utf-8"),
        ("a.css", "text/css; charset=utf-8"),
        ("i.svg", "image/svg+xml; charset=utf-8"),
        ("f.woff2", "font/woff2"),
        ("x.map", "application/json; charset=utf-8"),
        ("i.png", "image/png"),
        ("blob.unknownext", "application/octet-stream"),
    ],
)
def test_content_types(name: str, expected: str) -> None:
    assert content_type(name) == expected


def test_acl() -> None:
    assert is_admin([], "") is True
    assert is_admin([], "anyone") is True
    assert is_admin(["alice", "bob"], "bob") is True
    assert is_admin(["alice"], "") is False
    assert is_admin(["alice"], "Alice") is False


def test_config_cidr() -> None:
    assert config_allowed("127.0.0.1/8", "127.1.2.3") is True
    assert config_allowed("127.0.0.1/8", "10.0.0.1") is False
    assert config_allowed("127.0.0.1/8", "::ffff:127.0.0.1") is True
    assert config_allowed("127.0.0.1/8", "::1") is False
    assert config_allowed("::1/128", "::1") is True
    assert config_allowed("", "10.0.0.1") is True
    assert config_allowed("127.0.0.1/8", "not-an-ip") is None


def test_admin_action_payload_matches_go() -> None:
    auth = "Basic " + base64.b64encode(b"carol:secret").decode()
    payload = admin_action(
        "pause_channel",
        "t",
        "c",
        headers={"Host": "admin:4171", "User-Agent": "ua/1", "Authorization": auth},
        remote_addr="10.1.1.1:5555",
        path="/api/topics/t/c",
        query="x=1",
        tls=False,
        timestamp=1234,
        via="adminhost",
    )
    assert payload == {
        "action": "pause_channel",
        "topic": "t",
        "channel": "c",
        "timestamp": 1234,
        "user": "carol",
        "remote_ip": "10.1.1.1:5555",
        "user_agent": "ua/1",
        "url": "http://admin:4171/api/topics/t/c?x=1",
        "via": "adminhost",
    }
    assert list(payload) == [
        "action", "topic", "channel", "timestamp", "user", "remote_ip", "user_agent", "url",
        "via",
    ]  # fmt: skip


def test_admin_action_omits_empty_fields_and_detects_https() -> None:
    payload = admin_action(
        "tombstone_topic_producer",
        "t",
        node="n:4151",
        headers={"Host": "h", "X-Scheme": "https"},
        remote_addr="1.2.3.4:1",
        path="/api/nodes/n:4151",
        query="",
        tls=False,
        timestamp=1,
        via="v",
    )
    assert "channel" not in payload and "user" not in payload
    assert payload["node"] == "n:4151"
    assert payload["url"] == "https://h/api/nodes/n:4151"
    assert payload["user_agent"] == ""


@pytest.mark.parametrize(
    ("header", "user"),
    [("Basic " + base64.b64encode(b"u:p").decode(), "u"), ("Basic !!!", ""),
     ("Bearer abc", ""), ("Basic " + base64.b64encode(b"nocolon").decode(), ""), ("", "")],
)  # fmt: skip
def test_basic_auth_user(header: str, user: str) -> None:
    assert basic_auth_user(header) == user


async def test_notifier_queue_drops_when_full() -> None:
    notifier = Notifier(queue_size=2)
    for i in range(3):
        notifier.notify({"action": "create_topic", "topic": str(i)})
    assert notifier.dropped == 1
    received = [notifier._receive.receive_nowait() for _ in range(2)]
    assert [r["topic"] for r in received] == ["0", "1"]
    with pytest.raises(trio.WouldBlock):
        notifier._receive.receive_nowait()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"", "EOF"),
        (b"  \n", "EOF"),
        (b"{oops", "invalid character 'o' looking for beginning of value"),
        (b'{"topic": "t"', "unexpected EOF"),
        (b"[1]", "json: cannot unmarshal array into Go value of type struct"),
        (b'{"topic": 5}',
         "json: cannot unmarshal number into Go struct field .topic of type string"),
    ],
)  # fmt: skip
def test_decode_body_errors(body: bytes, error: str) -> None:
    with pytest.raises(ValueError) as info:
        decode_go_json_body(body, ("topic", "channel"))
    assert str(info.value) == error


def test_decode_body_values() -> None:
    assert decode_go_json_body(b'{"topic":"t"} trailing', ("topic", "channel")) == {
        "topic": "t",
        "channel": "",
    }
    assert decode_go_json_body(b'{"TOPIC":"t","channel":null}', ("topic", "channel")) == {
        "topic": "t",
        "channel": "",
    }
    assert decode_go_json_body(b"null", ("action",)) == {"action": ""}


def test_report_message_and_errors() -> None:
    report = Report()
    assert report.message == "" and report.errors_json() == []
    report.add([])
    assert report.message == ""
    a = UpstreamError("a:1", "connection refused", "Get x: connection refused")
    b = UpstreamError("b:2", "HTTP 500: NOK", 'got response 500 Internal Server Error "NOK"')
    report.add([a, b])
    report.add([a])
    assert report.message == (
        'WARNING: Get x: connection refused\ngot response 500 Internal Server Error "NOK"; '
        "Get x: connection refused"
    )
    assert report.errors_json() == [
        {"address": "a:1", "error": "connection refused"},
        {"address": "b:2", "error": "HTTP 500: NOK"},
    ]


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"a=%zz", 'invalid URL escape "%zz"'),
        (b"a=%4", 'invalid URL escape "%4"'),
        (b"a=1%", 'invalid URL escape "%"'),
        (b"%g1=x", 'invalid URL escape "%g1"'),
        (b"a=%zz&b=%yy", 'invalid URL escape "%zz"'),  # the first one
        (b"a=%zz&b=1;c", "invalid semicolon separator in query"),  # a ";" wins
        (b"a=1;b=%zz", "invalid semicolon separator in query"),
        (b'a=%"x', 'invalid URL escape "%\\"x"'),
        (b"a=%\xff", 'invalid URL escape "%\\xff"'),
    ],
)
def test_go_query_error(raw: bytes, text: str) -> None:
    assert go_query_error(raw) == text
