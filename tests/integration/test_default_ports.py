"""With no address flags the daemons listen on NSQ's default ports: nsqd on 0.0.0.0:4150 (TCP),
:4151 (HTTP) and, with a certificate, :4152 (HTTPS); nsqlookupd on :4160 and :4161; nsqadmin on
:4171. They run in a network namespace of their own (`unshare -n`), where those ports are free
whatever the host runs, and are reached through its loopback: no test binds a default port on
the host (.ci/run holds them all while the tests run, `scripts/hold-ports`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trustme

from tests.integration.netns import run_in_netns
from trionsq.testing import pythonpath_env

# Run inside the namespace: bring its loopback up, start the three daemons with their default
# addresses, reach each listener on 127.0.0.1, stop them; print what was seen as JSON.
_INSIDE = r"""
import fcntl, json, re, socket, ssl, struct, subprocess, sys, time, urllib.request

data, cert = sys.argv[1], sys.argv[2]
with socket.socket() as s:  # ip link set lo up (SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP)
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
trionsq = [sys.executable, "-m", "trionsq"]
daemons = {
    "nsqd": trionsq + ["nsqd", f"--data-path={data}", f"--tls-cert={cert}", f"--tls-key={cert}"],
    "nsqlookupd": trionsq + ["nsqlookupd"],
    "nsqadmin": trionsq + ["nsqadmin", "--lookupd-http-address=127.0.0.1:4161"],
}
procs = {
    name: subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    for name, argv in daemons.items()
}
unverified = ssl._create_unverified_context()

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2, context=unverified) as response:
            return response.read().decode()
    except OSError as err:
        return repr(err)

def tcp(port, magic):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(magic)
            return "connected"
    except OSError as err:
        return repr(err)

seen = {}
try:
    urls = {
        "4151": "http://127.0.0.1:4151/ping",
        "4152": "https://127.0.0.1:4152/ping",
        "4161": "http://127.0.0.1:4161/ping",
        "4171": "http://127.0.0.1:4171/ping",
    }
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = {port: get(url) for port, url in urls.items()}
        if all(answer == "OK" for answer in seen.values()):
            break
        time.sleep(0.1)
    seen["4150"] = tcp(4150, b"  V2")
    seen["4160"] = tcp(4160, b"  V1")
finally:
    logs, codes = {}, {}
    for name, proc in procs.items():
        proc.send_signal(15)
    for name, proc in procs.items():
        try:
            codes[name] = proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            codes[name] = proc.wait()
        logs[name] = re.findall(r"\b(?:TCP|HTTPS?): listening on \S+", proc.stderr.read())
print(json.dumps({"answers": seen, "listening": logs, "exit_codes": codes}))
"""


def test_daemons_listen_on_nsqs_default_ports(tmp_path: Path) -> None:
    cert = str(tmp_path / "server.pem")
    trustme.CA().issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(cert)
    (tmp_path / "data").mkdir()
    done = run_in_netns(
        [sys.executable, "-c", _INSIDE, str(tmp_path / "data"), cert],
        timeout=120,
        env=pythonpath_env(),
    )
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err
    result = json.loads(out)
    assert result["answers"] == {
        "4150": "connected",
        "4151": "OK",
        "4152": "OK",
        "4160": "connected",
        "4161": "OK",
        "4171": "OK",
    }, err
    assert result["listening"] == {
        "nsqd": [
            "TCP: listening on 0.0.0.0:4150",
            "HTTP: listening on 0.0.0.0:4151",
            "HTTPS: listening on 0.0.0.0:4152",
        ],
        "nsqlookupd": ["TCP: listening on 0.0.0.0:4160", "HTTP: listening on 0.0.0.0:4161"],
        "nsqadmin": ["HTTP: listening on 0.0.0.0:4171"],
    }
    assert result["exit_codes"] == {"nsqd": 0, "nsqlookupd": 0, "nsqadmin": 0}
