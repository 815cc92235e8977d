"""The deployment files in deploy/, as far as these machines run them.

* **systemd units** (deploy/systemd): `systemd-analyze verify` accepts them, and their
  ExecStart command lines, with the example configurations (deploy/config) and the installed
  wheel, make a cluster that serves: systemd itself does not run here as a service manager.
* **The image** (deploy/Dockerfile): podman builds it (chroot isolation); its configuration is
  checked (user, volume, stop signal, health check, command). Containers cannot run on these
  machines (crun: "cgroups in hybrid mode not supported"; runc cannot mount the cgroup
  hierarchy), so the cluster of deploy/compose.yaml runs from the image's file system instead:
  each service's command, chrooted into the image as its non-root user, in a network namespace
  of its own with an address per service that its name resolves to (as compose's network
  does). That checks what is inside the image (the commands, the user and /data, the health
  check), not the container runtime.

Each cluster publishes a message to every nsqd, finds them through nsqlookupd and nsqadmin,
and shuts down on SIGTERM with exit status 0 (`deploy_cluster.py`, run in the namespace).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.netns import run_in_netns
from tests.integration.wheel import ROOT, run_ok

DEPLOY = ROOT / "deploy"
RUNNER = Path(__file__).with_name("deploy_cluster.py")
UNITS = ("nsqlookupd", "nsqd", "nsqadmin")
#: The base image scripts/setup-podman makes (Debian's python3; Docker Hub is not reachable
#: from every machine the tests run on).
TEST_BASE = "localhost/trionsq-test-python:bookworm"


def _run_cluster(spec: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(spec))
    done = run_in_netns([sys.executable, str(RUNNER), str(path)], timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _unit(name: str) -> dict[str, str]:
    """The unit's key=value lines (the last of a repeated key)."""
    text = (DEPLOY / "systemd" / f"{name}.service").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")


def test_the_units_pass_systemd_analyze_verify(installed: Path, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze on this machine")
    for name in UNITS:
        text = (DEPLOY / "systemd" / f"{name}.service").read_text()
        # The units name /opt/trionsq/bin, the README's install; here the test's venv.
        (tmp_path / f"{name}.service").write_text(text.replace("/opt/trionsq/bin", str(installed)))
    done = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / f"{n}.service") for n in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # verify exits 0 on an unknown key, saying so on stderr: any line naming a unit fails.
    complaints = [line for line in done.stderr.splitlines() if ".service" in line]
    assert done.returncode == 0 and not complaints, done.stderr


def test_the_units_restart_on_failure_and_give_nsqd_time_to_flush() -> None:
    for name in UNITS:
        unit = _unit(name)
        assert unit["Restart"] == "on-failure"
        assert unit["KillSignal"] == "SIGTERM"
        assert unit["DynamicUser"] == "yes" and unit["ProtectSystem"] == "strict"
    assert int(_unit("nsqd")["TimeoutStopSec"]) >= 60
    assert _unit("nsqd")["StateDirectory"] == "nsqd"


def test_the_units_command_lines_and_example_configs_make_a_cluster(
    installed: Path, tmp_path: Path
) -> None:
    config, data = tmp_path / "etc-nsq", tmp_path / "var-lib-nsqd"
    shutil.copytree(DEPLOY / "config", config)
    data.mkdir()
    daemons = {}
    ping = {"nsqlookupd": 4161, "nsqd": 4151, "nsqadmin": 4171}
    for name in UNITS:
        command = _unit(name)["ExecStart"]
        command = command.replace("/opt/trionsq/bin", str(installed))
        command = command.replace("/etc/nsq", str(config)).replace("/var/lib/nsqd", str(data))
        daemons[name] = {"argv": command.split(), "ping": f"http://127.0.0.1:{ping[name]}/ping"}
    report = _run_cluster(
        {
            "daemons": daemons,
            "publish": ["http://127.0.0.1:4151"],
            "lookupd": "http://127.0.0.1:4161",
            "nsqadmin": "http://127.0.0.1:4171",
        },
        tmp_path,
    )
    logs = report["logs"]
    assert report["ping"] == dict.fromkeys(UNITS, True), logs
    assert report["published"] == ["OK"]
    # The example nsqd.toml registers with 127.0.0.1:4160 and broadcasts the host name.
    assert report["producers"] == [f"{socket.gethostname()}:4150"], logs
    assert report["nsqadmin"]["message_count"] == 1, report["nsqadmin"]
    assert report["exit"] == dict.fromkeys(UNITS, 0), logs
    assert (data / "nsqd.dat").exists()  # the ordered shutdown wrote the metadata


def _flagset(name: str) -> Any:
    from trionsq.nsqadmin.options import nsqadmin_flagset
    from trionsq.nsqd.options import nsqd_flagset
    from trionsq.nsqlookupd.options import nsqlookupd_flagset

    return {"nsqd": nsqd_flagset, "nsqlookupd": nsqlookupd_flagset, "nsqadmin": nsqadmin_flagset}[
        name
    ]()


@pytest.mark.parametrize("name", UNITS)
def test_every_key_of_the_example_configs_is_one_the_daemon_reads(name: str) -> None:
    """Like Go's, the daemons ignore a config key they do not know: a misspelt key in an
    example would silently do nothing. Each key set, or shown commented out, must be known;
    each value set must load."""
    from trionsq.options.config import coerce_config_value, load_config

    path = DEPLOY / "config" / f"{name}.toml"
    known = _flagset(name).by_cfg
    shown = re.findall(r"^#? ?([a-z_]+) = ", path.read_text(), re.M)
    assert shown and not [key for key in shown if key not in known], sorted(known)
    for key, value in load_config(str(path)).items():
        coerce_config_value(known[key], value)


# --- the image ---------------------------------------------------------------------------


def _podman_ready() -> None:
    reason = None
    if shutil.which("podman") is None:
        reason = "no podman (scripts/setup-podman installs it)"
    elif subprocess.run(["podman", "image", "exists", TEST_BASE], timeout=60).returncode:
        reason = f"no {TEST_BASE} image (scripts/setup-podman makes it)"
    elif os.geteuid() != 0:
        reason = "the image test mounts the image's file system and chroots: it needs root"
    if reason:
        if os.environ.get("TRIONSQ_REQUIRE_PODMAN") == "1":
            pytest.fail(f"{reason} (TRIONSQ_REQUIRE_PODMAN=1)", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def image() -> Iterator[dict[str, Any]]:
    """deploy/Dockerfile built on the test base: its inspect record and a mounted container
    file system (``root``), removed afterwards."""
    _podman_ready()
    tag = f"localhost/trionsq-deploy-test:{os.getpid()}"
    run_ok(
        [
            "podman",
            "build",
            "--isolation=chroot",
            "--layers=false",  # leaves no intermediate image behind (the build stage)
            "--format=docker",  # OCI images drop HEALTHCHECK
            "-f",
            str(DEPLOY / "Dockerfile"),
            f"--build-arg=PYTHON_IMAGE={TEST_BASE}",
            "-t",
            tag,
            str(ROOT),
        ]
    )
    container = None
    try:
        inspect = json.loads(run_ok(["podman", "image", "inspect", tag]).stdout)[0]
        container = run_ok(["podman", "create", tag]).stdout.strip()
        root = run_ok(["podman", "mount", container]).stdout.strip()
        yield {"inspect": inspect, "root": Path(root)}
    finally:
        if container:
            subprocess.run(["podman", "umount", container], capture_output=True, timeout=60)
            subprocess.run(["podman", "rm", "-f", container], capture_output=True, timeout=60)
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True, timeout=120)


def test_the_image_runs_as_a_non_root_user_with_a_data_volume(image: dict[str, Any]) -> None:
    config = image["inspect"]["Config"]
    assert config["User"] == "nsq"
    assert "/data" in config["Volumes"]
    assert config["StopSignal"] == "SIGTERM"
    assert config["Cmd"] == ["nsqd", "--data-path=/data"]
    assert "healthcheck.py" in " ".join(image["inspect"]["Healthcheck"]["Test"])
    root: Path = image["root"]
    passwd = (root / "etc" / "passwd").read_text()
    assert re.search(r"^nsq:x:10001:", passwd, re.M), passwd
    assert (root / "data").stat().st_uid == 10001
    for name in ("nsqd", "nsqlookupd", "nsqadmin", "nsq_tail", "to_nsq", "trionsq"):
        assert os.access(root / "opt" / "trionsq" / "bin" / name, os.X_OK), name
    # The compiled loops were built (the Dockerfile asserts it) and no pip is left behind.
    assert not (root / "opt" / "trionsq" / "bin" / "pip").exists()


def test_the_compose_cluster_serves_from_the_image(image: dict[str, Any], tmp_path: Path) -> None:
    import yaml

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"nsqlookupd", "nsqd-1", "nsqd-2", "nsqadmin"}
    for name in ("nsqd-1", "nsqd-2"):
        assert services[name]["stop_grace_period"] == "60s"
        assert services[name]["volumes"] == [f"{name}-data:/data"]
    root: Path = image["root"]
    # One loopback address per service, its name resolving to it, as compose's network does.
    address = {name: f"127.0.0.{i + 2}" for i, name in enumerate(services)}
    hosts = "".join(f"{ip} {name}\n" for name, ip in address.items())
    (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n" + hosts)
    # Each nsqd has a volume of its own in compose; here they share one file system.
    (root / "data2").mkdir(exist_ok=True)
    os.chown(root / "data2", 10001, 10001)
    env = ["env", *image["inspect"]["Config"]["Env"]]
    listen = {
        "nsqlookupd": ["--tcp-address={}:4160", "--http-address={}:4161"],
        "nsqd-1": ["--tcp-address={}:4150", "--http-address={}:4151"],
        "nsqd-2": ["--tcp-address={}:4150", "--http-address={}:4151", "--data-path=/data2"],
        "nsqadmin": ["--http-address={}:4171"],
    }
    ping = {"nsqlookupd": 4161, "nsqd-1": 4151, "nsqd-2": 4151, "nsqadmin": 4171}

    def in_image(*argv: str) -> list[str]:
        return ["chroot", "--userspec=10001:10001", str(root), *env, *argv]

    daemons = {
        name: {
            "argv": in_image(*service["command"], *(f.format(address[name]) for f in listen[name])),
            "ping": f"http://{address[name]}:{ping[name]}/ping",
        }
        for name, service in services.items()
    }
    check = image["inspect"]["Healthcheck"]["Test"]
    assert check[0] == "CMD"
    health = {
        name: in_image(f"NSQ_HEALTH_URL=http://{address[name]}:{ping[name]}/ping", *check[1:])
        for name in services
    }
    health["nothing listening"] = in_image("NSQ_HEALTH_URL=http://127.0.0.1:9/ping", *check[1:])
    report = _run_cluster(
        {
            "daemons": daemons,
            "publish": [f"http://{address['nsqd-1']}:4151", f"http://{address['nsqd-2']}:4151"],
            "lookupd": f"http://{address['nsqlookupd']}:4161",
            "nsqadmin": f"http://{address['nsqadmin']}:4171",
            "health": health,
        },
        tmp_path,
    )
    logs = report["logs"]
    assert report["ping"] == dict.fromkeys(services, True), logs
    assert report["published"] == ["OK", "OK"]
    assert report["producers"] == ["nsqd-1:4150", "nsqd-2:4150"], logs
    assert report["nsqadmin"]["message_count"] == 2, report["nsqadmin"]
    for name in services:
        assert report["health"][name] == [0, ""], (name, report["health"])
    code, said = report["health"]["nothing listening"]
    assert code == 1 and said.startswith("unhealthy: http://127.0.0.1:9/ping"), said
    assert report["exit"] == dict.fromkeys(services, 0), logs
    for data in ("data", "data2"):  # written by the non-root user, at the ordered shutdown
        assert (root / data / "nsqd.dat").stat().st_uid == 10001
