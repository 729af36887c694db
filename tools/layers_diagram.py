"""Draw the package's layer diagram from its imports, into docs/architecture.md.

The layers are `superopt.layers.LAYERS`; the arrows are the module-level imports
(including `TYPE_CHECKING` ones) between layers, counted, read from the source with
`ast` (`superopt.layers.imports`). The text goes between two marker comments in
docs/architecture.md, so the diagram cannot drift from the code: tests/test_layers.py
compares the committed text with `render()`.

Run: `.venv/bin/python tools/layers_diagram.py` prints it; `--write` puts it in
docs/architecture.md; `--check` exits 1 when the committed one differs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from superopt import layers  # noqa: E402  (the checkout's package, not an installed one)

DOC = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- layers:begin (drawn by tools/layers_diagram.py from the imports; do not edit) -->"
END = "<!-- layers:end -->"
WIDTH = 92


def _short(module: str) -> str:
    return module.removeprefix("superopt.") or "superopt"


def _wrap(words: list[str], indent: str) -> list[str]:
    lines, line = [], indent
    for w in words:
        if len(line) + len(w) + 1 > WIDTH and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += w + " "
    if line.strip():
        lines.append(line.rstrip())
    return lines


def render(edges: Iterable[layers.Edge]) -> str:
    """The diagram as markdown: a text block, top layer first, each layer with what it
    holds (its declared modules and packages) and the layers below it that it imports at
    module level. Only the layers' structure shows, not counts, so adding a module or an
    import changes the diagram only when it changes which layers depend on which."""
    edges = list(edges)
    mods = layers.modules(layers.package_root())
    arrows: set[tuple[int, int]] = set()
    for e in edges:
        if e.kind == layers.LAZY:
            continue
        a, b = layers.layer_of(e.source), layers.layer_of(e.target)
        if a != b:
            arrows.add((a, b))
    out = ["```"]
    for i in reversed(range(len(layers.LAYERS))):
        layer = layers.LAYERS[i]
        held = [_short(p) for p in layer.prefixes
                if any(m == p or m.startswith(p + ".") for m in mods)]
        out.append(f"[{i + 1}] {layer.name}: {layer.what}")
        out.extend(_wrap(held, "      "))
        below = [layers.LAYERS[b].name for a, b in sorted(arrows, key=lambda ab: -ab[1])
                 if a == i]
        if below:
            out.extend(_wrap(["imports", *[w + "," for w in below[:-1]], below[-1]], "   -> "))
        if i:
            out.append("        |")
    out.append("```")
    lazy_cycles = layers.cycles(edges)
    out.append("")
    out.append("No module-level import points to a higher layer. Import cycles, counting "
               f"imports inside functions: {len(lazy_cycles)}"
               + (" (" + "; ".join(" <-> ".join(map(_short, c)) for c in lazy_cycles) + ")"
                  if lazy_cycles else "") + ".")
    return "\n".join(out) + "\n"


def between_markers(doc: str) -> str | None:
    """The text between the markers in `doc` (None without them)."""
    if BEGIN not in doc or END not in doc:
        return None
    return doc.split(BEGIN, 1)[1].split(END, 1)[0].lstrip("\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="update docs/architecture.md")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when docs/architecture.md's diagram is stale")
    args = ap.parse_args(argv)
    text = render(layers.imports(layers.package_root()))
    doc = DOC.read_text(encoding="utf-8")
    if args.check:
        same = between_markers(doc) == text
        print("up to date" if same else "stale: run tools/layers_diagram.py --write")
        return 0 if same else 1
    if args.write:
        if between_markers(doc) is None:
            raise SystemExit(f"{DOC}: add the lines {BEGIN!r} and {END!r} where it goes")
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        DOC.write_text(f"{head}{BEGIN}\n{text}{END}{tail}", encoding="utf-8")
        print(f"wrote {DOC}")
        return 0
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
