"""The nursery tree docs/DESIGN.md draws is the one a running nsqd has.

nsqds run in process (tests/nsqd_harness.py), with what makes every task of the drawing
exist: a topic, a channel, a consumer that received a message, a publisher, an nsqlookupd,
statsd, HTTP; then three replicating members, as tests/integration/test_replication.py runs
them. Trio's task tree is walked from the root task to every ``NSQD.run`` task and compared
with the tree between docs/DESIGN.md's ``<!-- nursery-tree -->`` markers:

- every task running is drawn, under the nursery it runs in;
- every task drawn is seen running in one of the two cases, but for those marked ``~``
  (short-lived: a request, a catch-up, a shutdown step);
- every task the drawing names by its function (``module.Class.method``) is a function of
  trionsq.nsqd, so that a move or a rename shows here.

Names are trio's: the ``name=`` a task was started with, else its function's qualified name
(``trionsq.nsqd.`` left out in the drawing). Per-instance parts (after the first ``:``, as in
``topic-pump:<topic>``) are compared as placeholders.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.integration.test_replication import FAST, SECRET, publish
from tests.nsqd_harness import Conn, start_nsqd
from trionsq.nsqd.assembly import new_nsqd
from trionsq.nsqd.options import NSQDOptions
from trionsq.nsqlookupd.nsqlookupd import NSQLookupd
from trionsq.nsqlookupd.options import NSQLookupdOptions
from trionsq.protocol import pub
from trionsq.testing import free_ports

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "DESIGN.md"
DAEMON_TASK = "trionsq.nsqd.nsqd.NSQD.run"
#: A drawn task whose own tasks are not drawn (hypercorn's, under ``http``).
OPAQUE = "…"
SHORT_LIVED = "~"


@dataclass
class Node:
    """A task, or (``nursery`` set) a nursery, of the drawing."""

    name: str
    nursery: bool = False
    optional: bool = False
    opaque: bool = False
    children: list[Node] = field(default_factory=list)
    seen: bool = False

    def task(self, name: str) -> Node | None:
        for child in self.children:
            if child.name == name:
                return child
        return None


def normalise(name: str) -> str:
    """A task name as compared: ``trionsq.nsqd.`` dropped, instance parts a placeholder."""
    name = name.removeprefix("trionsq.nsqd.")
    head, colon, _ = name.partition(":")
    return f"{head}:<>" if colon else name


def parse_tree(text: str) -> Node:
    """The drawing in `text` (docs/DESIGN.md): one node a line, its name the first word after
    the branch (``├─ `` / ``└─ ``) or at the start of the line for the root; a nursery's line
    is ``nursery`` (a label may follow); words after two spaces describe; a line with no
    branch continues the one above."""
    match = re.search(
        r"<!-- nursery-tree -->\n```[^\n]*\n(.*?)```\n<!-- /nursery-tree -->", text, re.S
    )
    assert match, "docs/DESIGN.md lacks its <!-- nursery-tree --> block"
    root: Node | None = None
    stack: list[tuple[int, Node]] = []
    for line in match.group(1).splitlines():
        if not line.strip():
            continue
        branch = re.match(r"^([ │]*)[├└]─ ", line)
        if branch:
            column = branch.end()
        elif root is None:
            column = 0
        else:
            continue  # a description carried over
        word = line[column:].split("  ")[0].strip()
        optional = word.startswith(SHORT_LIVED)
        word = word.removeprefix(SHORT_LIVED)
        nursery = word == "nursery" or word.startswith(("nursery ", "nursery:"))
        name = word if nursery else word.split()[0]
        node = Node(
            name if nursery or name == OPAQUE else normalise(name),
            nursery=nursery,
            optional=optional,
        )
        if root is None:
            root = node
            stack = [(column, node)]
            continue
        while stack and stack[-1][0] >= column:
            stack.pop()
        assert stack, f"a line of the drawing outside the root: {line!r}"
        parent = stack[-1][1]
        if name == OPAQUE:
            parent.opaque = True
            continue
        assert parent.nursery != nursery, f"tasks and nurseries must alternate: {line!r}"
        parent.children.append(node)
        stack.append((column, node))
    assert root is not None, "the drawing is empty"
    return root


def live_tree(task: Any) -> Node:
    """`task` and what runs under it, as a `Node`."""
    node = Node(normalise(task.name))
    for nursery in task.child_nurseries:
        child = Node("nursery", nursery=True)
        child.children = [live_tree(t) for t in sorted(nursery.child_tasks, key=lambda t: t.name)]
        if child.children:
            node.children.append(child)
    return node


def daemon_tasks() -> list[Any]:
    """Every ``NSQD.run`` task of this Trio run."""
    found = []

    def walk(task: Any) -> None:
        if task.name == DAEMON_TASK:
            found.append(task)
            return
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found


def render(node: Node, indent: str = "") -> str:
    """`node` as an indented outline (for a failure's message)."""
    out = f"{indent}{node.name}\n"
    for child in node.children:
        out += render(child, indent + "  ")
    return out


def compare(drawn: Node, live: Node, path: str, wrong: list[str]) -> None:
    """Mark what of `drawn` runs in `live`; add to `wrong` what runs and is not drawn."""
    drawn.seen = True
    if drawn.opaque:
        return
    nurseries = [n for n in drawn.children if n.nursery]
    for live_nursery in live.children:
        names = {t.name for t in live_nursery.children}
        # The drawn nursery these tasks run in: the one that draws most of them.
        best = max(nurseries, key=lambda n: len(names & {t.name for t in n.children}), default=None)
        if best is None:
            wrong.append(f"{path}: a nursery running {sorted(names)} is not drawn")
            continue
        best.seen = True
        for task in live_nursery.children:
            child = best.task(task.name)
            if child is None:
                wrong.append(f"{path} / {best.name}: task {task.name} is not drawn")
            else:
                compare(child, task, f"{path} / {best.name} / {task.name}", wrong)


def not_seen(node: Node, path: str, skip: tuple[str, ...] = ()) -> list[str]:
    """What is drawn (not short-lived, not under a task named in `skip`) and never ran."""
    if node.optional or node.name.startswith(skip):
        return []
    here = f"{path} / {node.name}" if path else node.name
    missing = [] if node.seen else [here]
    for child in node.children:
        missing += not_seen(child, here, skip)
    return missing


def functions_named(node: Node) -> list[str]:
    """The drawn names that are functions (``module.Class.method``) missing from trionsq.nsqd."""
    missing = []
    name = node.name
    if not node.nursery and re.fullmatch(r"[a-z_][\w.<>]*\.[\w<>]+", name) and ":" not in name:
        parts = name.split(".<locals>")[0].split(".")
        for cut in range(len(parts) - 1, 0, -1):
            try:
                obj: Any = importlib.import_module("trionsq.nsqd." + ".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    for child in node.children:
        missing += functions_named(child)
    return missing


def check(drawing: Node, skip_unseen: tuple[str, ...]) -> None:
    daemons = daemon_tasks()
    assert daemons, "no NSQD.run task found"
    wrong: list[str] = []
    for task in daemons:
        live = live_tree(task)
        assert live.name == drawing.name, (live.name, drawing.name)
        compare(drawing, live, drawing.name, wrong)
    outline = "".join(render(live_tree(t)) for t in daemons[:1])
    assert not wrong, (
        "docs/DESIGN.md's nursery tree lacks what runs:\n"
        + "\n".join(sorted(set(wrong)))
        + f"\n\nthe live tree:\n{outline}"
    )
    missing = not_seen(drawing, "", skip_unseen)
    assert not missing, (
        "docs/DESIGN.md's nursery tree draws tasks that did not run (mark a short-lived one"
        " with ~):\n" + "\n".join(missing) + f"\n\nthe live tree:\n{outline}"
    )


def test_the_drawing_names_existing_functions() -> None:
    assert functions_named(parse_tree(DESIGN.read_text())) == []


async def until(condition: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.02)


async def test_nsqd_runs_the_drawn_tree(tmp_path: Path) -> None:
    """One nsqd with everything but replication (its subtree is the next test's)."""
    drawing = parse_tree(DESIGN.read_text())
    async with trio.open_nursery() as nursery:
        lookupd = NSQLookupd(
            dataclasses.replace(
                NSQLookupdOptions(), tcp_address="127.0.0.1:0", http_address="127.0.0.1:0"
            )
        )
        await nursery.start(lookupd.run)
        assert lookupd.tcp_address is not None
        nsqd = await start_nsqd(
            nursery,
            str(tmp_path),
            http_address="127.0.0.1:0",
            broadcast_address="127.0.0.1",
            nsqlookupd_tcp_addresses=[f"127.0.0.1:{lookupd.tcp_address[1]}"],
            statsd_address=f"127.0.0.1:{free_ports(1)[0]}",
        )
        await until(lambda: all(p.connected for p in nsqd.lookup.peers.values()))
        consumer = await Conn.consumer(nsqd, "tree", "tree-channel", ready=1)
        publisher = await Conn.open(nsqd)
        await publisher.send(pub("tree", b"hello"))
        assert await publisher.response() == b"OK"
        await consumer.message()
        await trio.sleep(0.1)  # what the publish and delivery started has settled
        check(drawing, skip_unseen=("replication",))
        nursery.cancel_scope.cancel()


async def test_replicating_nsqds_run_the_drawn_tree(tmp_path: Path) -> None:
    """Three replicating members (with --sync-ack: the replica's fsync task); the first
    also with HTTP, a lookupd and statsd, so that the whole drawing runs somewhere."""
    drawing = parse_tree(DESIGN.read_text())
    ports = free_ports(3)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    async with trio.open_nursery() as nursery:
        lookupd = NSQLookupd(
            dataclasses.replace(
                NSQLookupdOptions(), tcp_address="127.0.0.1:0", http_address="127.0.0.1:0"
            )
        )
        await nursery.start(lookupd.run)
        assert lookupd.tcp_address is not None
        nodes: list[Any] = []  # NSQDs with replication (its attributes are not the core's)
        for i in range(3):
            data = tmp_path / f"n{i + 1}"
            data.mkdir()
            settings: dict[str, Any] = {
                **FAST,
                "node_id": i + 1,
                "tcp_address": addresses[i],
                "http_address": "",
                "data_path": str(data),
                "broadcast_address": "127.0.0.1",
                "replicate_to": [a for j, a in enumerate(addresses) if j != i],
                "replicate_topic": ["r.*"],
                "replication_secret": SECRET,
                "sync_ack": True,
            }
            if i == 0:
                settings["http_address"] = "127.0.0.1:0"
                settings["nsqlookupd_tcp_addresses"] = [f"127.0.0.1:{lookupd.tcp_address[1]}"]
                settings["statsd_address"] = f"127.0.0.1:{free_ports(1)[0]}"
            options = dataclasses.replace(NSQDOptions(), **settings)
            nodes.append(await nursery.start(new_nsqd(options).run))
        await until(lambda: all(p.connected for n in nodes for p in n.replication.peers))
        assert await publish(nodes[0], "r.tree", [b"one"]) == [b"one"]

        def settled() -> bool:
            replicas = [n.topics["r.tree"].replica for n in nodes if "r.tree" in n.topics]
            roles = sorted(r.role for r in replicas)
            return (
                roles == ["primary", "replica", "replica"] and len({r.epoch for r in replicas}) == 1
            )

        await until(settled)
        primary = next(n for n in nodes if n.topics["r.tree"].replica.role == "primary")
        consumer = await Conn.consumer(primary, "r.tree", "tree-channel", ready=1)
        await consumer.message()
        await trio.sleep(0.2)  # the members' epochs and syncs have settled
        check(drawing, skip_unseen=())
        nursery.cancel_scope.cancel()
