"""The import graph of trionsq/ against its layers (docs/DESIGN.md, "Layers").

Every module of trionsq/ is parsed with `ast` (nothing is imported): every import counts,
at the top of a module, inside a function, or under ``if TYPE_CHECKING:``, since each is a
dependency a reader must know. Relative imports are resolved, and ``from pkg import mod``
counts as importing ``pkg.mod`` when ``mod`` is a module of the package.

The rules, lowest layer first, are the table `LAYERS`: a module may import its own
component and any component of a lower layer; never a higher layer, never another component
of its own layer. `render_layers` prints the table that docs/DESIGN.md holds between its
``<!-- layers -->`` markers (run this file to print it). Beyond the layers: no import cycle
crosses two components, and none goes through the seam between nsqd's core and replication.

Within nsqd's core, `CORE_SUBLAYERS` orders its modules (foundations, model, daemon, fronts);
its upward arrows are counted and reported, and each sublayer's checked modules are held to
it.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "trionsq"
DESIGN = ROOT / "docs" / "DESIGN.md"

#: The layers, lowest first: (layer name, its components). A component is a module or a
#: package prefix; a module belongs to the component that is the longest prefix of its name.
#: ``trionsq.nsqd`` is nsqd's core: the package minus its replication layer and its
#: composition roots (the rows above it).
LAYERS: list[tuple[str, list[str]]] = [
    (
        "L0 base",
        [
            "trionsq",
            "trionsq.version",
            "trionsq.goerrors",
            "trionsq.logs",
            "trionsq.options",
            "trionsq.protocol",
            "trionsq.net",
            "trionsq.prometheus_text",
        ],
    ),
    (
        "L1 services",
        ["trionsq.diskqueue", "trionsq.http_common", "trionsq.daemon", "trionsq.request_counts"],
    ),
    ("L2 daemons and client", ["trionsq.client", "trionsq.nsqlookupd", "trionsq.nsqd"]),
    ("L3 replication", ["trionsq.nsqd.replication"]),
    (
        "L4 programs",
        [
            "trionsq.nsqd.main",
            "trionsq.nsqd.assembly",
            "trionsq.nsqadmin",
            "trionsq.apps",
            "trionsq.spark",
            "trionsq.testing",
        ],
    ),
    ("L5 command line", ["trionsq.cli", "trionsq.__main__", "trionsq.scripts"]),
]

#: Layers whose components may import one another: the base is one toolbox, the programs
#: share helpers (nsqd's main and assembly; the bench apps start daemons with
#: `trionsq.testing`), and ``python -m trionsq`` is the ``trionsq`` command. In the other
#: layers siblings are independent: the client is not built on nsqd, nor nsqd on nsqlookupd.
OPEN_LAYERS = {"L0 base", "L4 programs", "L5 command line"}

#: The sans-IO modules (codecs and rule tables: data and pure functions), the I/O libraries
#: they never import, and the only part of trionsq they may import: L0.
SANS_IO = ("trionsq.protocol", "trionsq.nsqd.replication.roles")
SANS_IO_FORBIDDEN = ("trio", "anyio", "asyncio", "hypercorn", "quart", "httpx")

#: nsqd's core in sublayers, lowest first (docs/DESIGN.md, "Inside nsqd's core"). At run time
#: a module imports only its own sublayer or lower ones; a lower module may still name a
#: higher one's class in annotations, under ``if TYPE_CHECKING:`` (a back-reference: the
#: topic its bounds belong to, the NSQD every part is given), counted by `core_upward_arrows`.
CORE_SUBLAYERS: list[tuple[str, list[str]]] = [
    (
        "foundations",
        [
            "trionsq.nsqd",
            "trionsq.nsqd.options",
            "trionsq.nsqd.data_path",
            "trionsq.nsqd.dead_letter_names",
            "trionsq.nsqd.tls_config",
            "trionsq.nsqd.opening",
            "trionsq.nsqd.wakeup",
            "trionsq.nsqd.socket_stream",
            "trionsq.nsqd.heartbeats",
            "trionsq.nsqd.memory_trim",
            "trionsq.nsqd.e2e_latency",
            "trionsq.nsqd.auth",
            "trionsq.nsqd.backend",
            "trionsq.nsqd.bounds",
            "trionsq.nsqd.acks",
        ],
    ),
    (
        "model",
        [
            "trionsq.nsqd.topic",
            "trionsq.nsqd.channel",
            "trionsq.nsqd.dead_letter",
            "trionsq.nsqd.client_v2",
        ],
    ),
    (
        "fronts",
        [
            "trionsq.nsqd.protocol_v2",
            "trionsq.nsqd.http_api",
            "trionsq.nsqd.peek",
            "trionsq.nsqd.stats",
            "trionsq.nsqd.prometheus",
            "trionsq.nsqd.statsd",
            "trionsq.nsqd.lookup",
            "trionsq.nsqd.metadata",
            "trionsq.nsqd.seam",
        ],
    ),
    ("daemon", ["trionsq.nsqd.nsqd"]),
]


@dataclass(frozen=True)
class Arrow:
    """``source`` imports ``target`` at ``path:line``."""

    source: str
    target: str
    path: str
    line: int
    type_only: bool

    def __str__(self) -> str:
        kind = " (type only)" if self.type_only else ""
        return f"{self.path}:{self.line}: {self.source} -> {self.target}{kind}"


# -- the graph ------------------------------------------------------------------------------


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package, by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of `tree`, and whether it is under ``if TYPE_CHECKING:``."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def walk(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, type_only))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                walk(statement, True)
            for statement in node.orelse:
                walk(statement, type_only)
            return
        for child in ast.iter_child_nodes(node):
            walk(child, type_only)

    walk(tree, False)
    return found


def import_graph(package: Path = PACKAGE) -> list[Arrow]:
    """Every arrow from a module of the package to another module of it."""
    modules = module_files(package)
    arrows = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        rel = path.relative_to(package.parent).as_posix()
        for node, type_only in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                for alias in node.names:
                    sub = f"{prefix}.{alias.name}"
                    targets.append(sub if sub in modules else prefix)
            for target in dict.fromkeys(targets):
                # `import a.b.c` of a module not in the tree: its longest known prefix.
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                arrow = Arrow(name, target, rel, node.lineno, type_only)
                if target in modules and target != name and arrow not in arrows:
                    arrows.append(arrow)
    return arrows


@functools.cache
def _graph() -> list[Arrow]:
    """`import_graph` of trionsq/, parsed once for all the tests."""
    return import_graph()


# -- the layers -----------------------------------------------------------------------------


def component_of(module: str, table: list[tuple[str, list[str]]] = LAYERS) -> tuple[int, str]:
    """(layer index, component) of `module`: the component that is its longest prefix."""
    best: tuple[int, str] | None = None
    for index, (_, components) in enumerate(table):
        for component in components:
            inside = module == component or module.startswith(component + ".")
            if inside and (best is None or len(component) > len(best[1])):
                best = (index, component)
    if best is None:
        raise ValueError(f"{module} is in no layer")
    return best


def allowed(source: str, target: str) -> bool:
    """Whether the layers let `source` import `target`."""
    s_layer, s_comp = component_of(source)
    t_layer, t_comp = component_of(target)
    if s_comp == t_comp or t_layer < s_layer:
        return True
    return t_layer == s_layer and LAYERS[s_layer][0] in OPEN_LAYERS


def render_layers() -> str:
    """The layers and who may import whom, as the Markdown table of docs/DESIGN.md."""
    lines = ["| layer | components | may import, besides itself |", "|---|---|---|"]
    for index, (name, components) in enumerate(LAYERS):
        number = name.split()[0]
        below = ["", "L0", "L0 and L1"][index] if index < 3 else f"L0 to L{index - 1}"
        if name in OPEN_LAYERS:
            may = f"{below} and the rest of {number}" if below else f"the rest of {number}"
        elif len(components) > 1:
            may = f"{below}; not the rest of {number}"
        else:
            may = below
        shown = ", ".join(_short(c) for c in components)
        lines.append(f"| {name} | {shown} | {may} |")
    return "\n".join(lines) + "\n"


def render_core_sublayers() -> str:
    """nsqd's core sublayers, as the Markdown table of docs/DESIGN.md."""
    lines = ["| sublayer | modules of trionsq/nsqd/ |", "|---|---|"]
    for name, modules in CORE_SUBLAYERS:
        shown = ", ".join(
            "`__init__`" if m == "trionsq.nsqd" else f"`{m.removeprefix('trionsq.nsqd.')}`"
            for m in modules
        )
        lines.append(f"| {name} | {shown} |")
    return "\n".join(lines) + "\n"


def _short(component: str) -> str:
    if component == "trionsq":
        return "`trionsq` (its `__init__`)"
    if component == "trionsq.nsqd":
        return "`nsqd` (its core: the rest of the package)"
    return f"`{component.removeprefix('trionsq.')}`"


def doc_block(text: str, marker: str) -> str | None:
    """What docs/DESIGN.md holds between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    match = re.search(rf"<!-- {marker} -->\n(.*?)<!-- /{marker} -->", text, re.S)
    return match.group(1) if match else None


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            scc = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                scc.append(top)
                if top == node:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def core_sublayer(module: str) -> int | None:
    """The index in `CORE_SUBLAYERS` of a module of nsqd's core; None for any other."""
    for index, (_, modules) in enumerate(CORE_SUBLAYERS):
        if module in modules:
            return index
    return None


def core_upward_arrows(arrows: list[Arrow]) -> list[Arrow]:
    """The arrows of nsqd's core from a sublayer to a higher one."""
    found = []
    for arrow in arrows:
        s, t = core_sublayer(arrow.source), core_sublayer(arrow.target)
        if s is not None and t is not None and t > s:
            found.append(arrow)
    return found


# -- the tests ------------------------------------------------------------------------------


def _listing(arrows: list[Arrow]) -> str:
    return "\n".join(str(a) for a in sorted(arrows, key=lambda a: (a.path, a.line, a.target)))


def test_every_module_is_in_a_layer() -> None:
    for module in module_files():
        component_of(module)


def test_core_sublayers_name_every_core_module() -> None:
    core = {m for m in module_files() if component_of(m)[1] == "trionsq.nsqd"}
    listed = {m for _, modules in CORE_SUBLAYERS for m in modules}
    assert core - listed == set(), "core modules in no sublayer"


def test_imports_follow_the_layers() -> None:
    wrong = [a for a in _graph() if not allowed(a.source, a.target)]
    assert not wrong, "imports against the layers (docs/DESIGN.md):\n" + _listing(wrong)


def test_sans_io_modules_do_no_io() -> None:
    wrong = []
    for name, path in module_files().items():
        if not any(name == m or name.startswith(m + ".") for m in SANS_IO):
            continue
        for node, _ in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                names = [node.module or ""] if not node.level else []
            for imported in names:
                if imported.split(".")[0] in SANS_IO_FORBIDDEN:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {imported}")
    for a in _graph():
        sans_io = any(a.source == m or a.source.startswith(m + ".") for m in SANS_IO)
        if sans_io and component_of(a.target)[0] > 0:
            wrong.append(str(a))
    assert not wrong, "sans-IO modules importing I/O or more than L0:\n" + "\n".join(wrong)


def test_no_cycle_between_components() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for a in _graph():
        s, t = component_of(a.source)[1], component_of(a.target)[1]
        if s != t:
            edges[s].add(t)
    cycles = _cycles(edges)
    assert not cycles, f"import cycles between components: {cycles}"


def test_no_cycle_between_packages() -> None:
    """No cycle of modules (type-only imports included) spans two packages."""
    files = module_files()

    def package(module: str) -> str:
        return module if files[module].name == "__init__.py" else module.rsplit(".", 1)[0]

    edges: dict[str, set[str]] = defaultdict(set)
    for a in _graph():
        edges[a.source].add(a.target)
    crossing = [scc for scc in _cycles(edges) if len({package(m) for m in scc}) > 1]
    assert not crossing, f"import cycles spanning packages: {crossing}"


def test_no_cycle_through_the_seam() -> None:
    """Modules of the core and of replication in one cycle (counting type-only imports)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for a in _graph():
        if a.source.startswith("trionsq.nsqd") and a.target.startswith("trionsq.nsqd"):
            edges[a.source].add(a.target)
    crossing = []
    for scc in _cycles(edges):
        parts = {component_of(m)[1] for m in scc}
        if {"trionsq.nsqd", "trionsq.nsqd.replication"} <= parts:
            crossing.append(scc)
    assert not crossing, f"cycles through the seam (core <-> replication): {crossing}"


def test_core_sublayers() -> None:
    """At run time, nsqd's core imports only its own sublayer or lower ones."""
    wrong = [a for a in core_upward_arrows(_graph()) if not a.type_only]
    assert not wrong, "upward imports inside nsqd's core (docs/DESIGN.md):\n" + _listing(wrong)


def test_design_doc_has_the_layers() -> None:
    text = DESIGN.read_text()
    for marker, table in (("layers", render_layers()), ("core-sublayers", render_core_sublayers())):
        block = doc_block(text, marker)
        assert block is not None, f"docs/DESIGN.md lacks its <!-- {marker} --> block"
        assert block == table, (
            f"docs/DESIGN.md's {marker} table differs from tests/unit/test_layers.py's; "
            "print both with `python tests/unit/test_layers.py`"
        )


if __name__ == "__main__":
    print(render_layers())
    print(render_core_sublayers(), end="")
    up = core_upward_arrows(_graph())
    if up:
        print(f"\nupward arrows inside nsqd's core ({len(up)}):\n{_listing(up)}")
