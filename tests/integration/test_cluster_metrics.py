"""Every daemon's ``/metrics`` on a running cluster (nsqlookupd, an nsqd registered with it,
nsqadmin reading it): each parses as the Prometheus text format, counts what happened, and
exports every metric the documented Grafana dashboard and Prometheus config
(docs/monitoring/) ask of it."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from trionsq.testing import DaemonProcess

MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
JOBS = ("nsqd", "nsqlookupd", "nsqadmin")


def _url(daemon: DaemonProcess) -> str:
    address = daemon.http_address
    assert address is not None
    return "http://{}:{}".format(*address)


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    """The HTTP base URL of each daemon, after a publish, a channel, a lookup and an nsqadmin
    page's API call (which one of its two lookupds, not there, fails)."""
    with DaemonProcess("nsqlookupd") as lookupd:
        lookupd_tcp = "{}:{}".format(*lookupd.tcp_address)
        with (
            DaemonProcess("nsqd", [f"--lookupd-tcp-address={lookupd_tcp}"]) as nsqd,
            DaemonProcess(
                "nsqadmin",
                [
                    f"--lookupd-http-address={_url(lookupd)[7:]}",
                    "--lookupd-http-address=127.0.0.1:9",  # not there: an upstream error a call
                    "--http-client-connect-timeout=1s",
                ],
            ) as nsqadmin,
        ):
            urls = {"nsqd": _url(nsqd), "nsqlookupd": _url(lookupd), "nsqadmin": _url(nsqadmin)}
            with httpx.Client(timeout=10) as http:
                assert http.post(f"{urls['nsqd']}/pub?topic=t", content=b"x").text == "OK"
                http.post(f"{urls['nsqd']}/channel/create?topic=t&channel=c").raise_for_status()
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    found = http.get(f"{urls['nsqlookupd']}/lookup?topic=t")
                    if found.status_code == 200 and found.json()["producers"]:
                        break
                    time.sleep(0.05)
                # One lookupd answers, the other is not there: a partial answer.
                assert http.get(f"{urls['nsqadmin']}/api/topics").status_code == 200
            yield urls


def _metrics(url: str) -> tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """The raw text of ``/metrics`` and its samples by (name, labels), checked to parse."""
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    return response.text, samples


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_nsqlookupd_counts_registrations_connections_and_requests(
    cluster: dict[str, str],
) -> None:
    _, samples = _metrics(cluster["nsqlookupd"])
    assert _value(samples, "nsqlookupd_producers") == 1
    assert _value(samples, "nsqlookupd_topics") == 1
    assert _value(samples, "nsqlookupd_channels") == 1
    assert _value(samples, "nsqlookupd_topic_producers", topic="t") == 1
    assert _value(samples, "nsqlookupd_tcp_connections") == 1
    assert _value(samples, "nsqlookupd_tcp_commands_total", command="IDENTIFY") == 1
    assert _value(samples, "nsqlookupd_tcp_commands_total", command="REGISTER") >= 2
    assert _value(samples, "nsqlookupd_http_requests_total", route="/lookup", code="200") >= 1
    assert _value(samples, "process_resident_memory_bytes") > 0


def test_nsqadmin_counts_its_api_calls_and_upstream_errors(cluster: dict[str, str]) -> None:
    _, samples = _metrics(cluster["nsqadmin"])
    calls = _value(samples, "nsqadmin_http_requests_total", route="/api/topics", code="200")
    assert calls == 1
    ok = _value(samples, "nsqadmin_upstream_requests_total", upstream="nsqlookupd", outcome="ok")
    assert ok >= 1
    failed = _value(
        samples, "nsqadmin_upstream_requests_total", upstream="nsqlookupd", outcome="error"
    )
    assert failed >= 1
    assert _value(samples, "nsqadmin_upstream_errors_total", address="127.0.0.1:9") >= 1


def _exported(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


def test_every_metric_the_dashboard_names_is_exported_by_its_job(cluster: dict[str, str]) -> None:
    exported = {job: _exported(_metrics(cluster[job])[0]) for job in JOBS}
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    checked = 0
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            jobs = re.search(r'job=~?"([^"]+)"', expr)
            assert jobs, f"{panel['title']}: every query names its job: {expr}"
            for name in re.findall(r"\b((?:nsq|nsqlookupd|nsqadmin|process)_[a-z_]+)\b", expr):
                for job in jobs.group(1).split("|"):
                    assert name in exported[job], f"{panel['title']}: {job} has no {name}"
                    checked += 1
    assert checked >= 15


def test_the_scrape_config_has_a_job_per_daemon_on_its_http_port() -> None:
    import yaml

    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(JOBS)
    ports = {"nsqd": "4151", "nsqlookupd": "4161", "nsqadmin": "4171"}
    for name, job in jobs.items():
        assert job["metrics_path"] == "/metrics"
        for target in job["static_configs"][0]["targets"]:
            assert target.endswith(f":{ports[name]}"), target
