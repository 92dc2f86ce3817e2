"""No import circle among the modules of tasks/, flows/ and cli/.

grimp (import-linter's graph builder) counts every import statement: at module level, inside
functions and under `if TYPE_CHECKING:`. A circle hidden in a function or in type hints is still a
circle: the modules cannot be read, tested or moved one without the other.

import-linter's own `acyclic_siblings` contract squashes each package into one node, so it would
also refuse circles between packages that no two modules form (one module of a package
importing a module of another that imports a third module of the first); this test looks at modules only.
"""

from __future__ import annotations

import grimp

PACKAGES = ("tasks", "flows", "cli")


def circles(graph: grimp.ImportGraph) -> list[str]:
    """One line per import that closes a circle: the import, then the way back."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                lines = sorted(
                    {d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)}
                )
                found.append(
                    f"{importer} -> {imported} (l.{', '.join(map(str, lines))}), and back: {' -> '.join(back)}"
                )
    return found


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert len(graph.modules) > 80
    assert circles(graph) == []


def test_a_circle_is_found_wherever_its_imports_sit() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b", line_number=3, line_contents="from pkg.b import x")
    graph.add_import(importer="pkg.b", imported="pkg.a", line_number=9, line_contents="from pkg.a import y")
    graph.add_import(importer="pkg.c", imported="pkg.a", line_number=1, line_contents="import pkg.a")
    assert circles(graph) == [
        "pkg.a -> pkg.b (l.3), and back: pkg.b -> pkg.a",
        "pkg.b -> pkg.a (l.9), and back: pkg.a -> pkg.b",
    ]


def test_type_checking_and_function_imports_count() -> None:
    # The circle jobspec <-> prediction.decisions was closed by an `if TYPE_CHECKING:` import;
    # tasks.sources <-> sources.sql by an import inside a method. Both kinds are in the graph.
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert graph.direct_import_exists(
        importer="tasks.monitoring.slices", imported="tasks.jobspec"
    )  # under TYPE_CHECKING
    assert graph.direct_import_exists(
        importer="tasks.features", imported="tasks.features.declared"
    )  # in job_features()
