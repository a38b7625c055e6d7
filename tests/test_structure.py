"""The shape the code promises (docs/engines.md, the README's "How it works"): checked, not hoped for.

Sizes (of the package and of ``bench/``), operators blind to the engines, template fields named as
their constructor parameters, every module registered with the provider, no import circle in
``bench/``, and the example DAGs that ``make example`` runs. Pure reading of the source (and ``make
example``'s answer without a DAG to run).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from typing import ClassVar

import pytest

import airflow_iceberg_dml
from airflow_iceberg_dml.get_provider_info import get_provider_info

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "airflow_iceberg_dml"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
#: Template fields deliberately not named as their parameter, and why.
RENAMED_TEMPLATE_FIELDS = {
    # The OpenLineage provider copies an operator attribute called ``parameters`` into every event
    # (its airflow run facet); the bound values can be personal data (tests/test_lineage.py).
    "parameter_values": "parameters",
}


def _sources(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` of ``path``, asked again once when CPython raises its spurious "AST constructor
    recursion depth mismatch" (the count is kept per interpreter, not per thread, and a parse in
    another thread of the test worker can upset it: cpython#106905; CI run 95 met it once)."""
    try:
        return ast.parse(path.read_text())
    except SystemError as error:
        if "recursion depth mismatch" not in str(error):
            raise
        return ast.parse(path.read_text())


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


#: Held to the sizes: the package, and the benchmarks that measure it (a module over 400 lines or a
#: function over 60 usually holds two ideas, in either).
SIZED_FOLDERS = [PACKAGE, REPO / "bench"]


@pytest.mark.parametrize("folder", SIZED_FOLDERS, ids=lambda folder: folder.name)
def test_no_module_is_over_400_lines(folder: Path):
    long = {
        str(path.relative_to(REPO)): count
        for path in _sources(folder)
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


@pytest.mark.parametrize("folder", SIZED_FOLDERS, ids=lambda folder: folder.name)
def test_no_function_is_over_60_lines(folder: Path):
    long = {
        f"{path.relative_to(REPO)}:{node.name}": node.end_lineno - node.lineno + 1  # type: ignore[operator]
        for path in _sources(folder)
        for node in _functions(_parse(path))
        if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES  # type: ignore[operator]
    }
    assert long == {}


def test_the_operators_never_name_a_concrete_engine():
    engines = (
        "IcebergSparkSubmitHook",
        "IcebergSparkConnectHook",
        "hooks.spark_submit",
        "hooks.spark_connect",
    )
    named = [
        f"{path.relative_to(REPO)}: {name}"
        for folder in ("operators", "sensors", "triggers")
        for path in _sources(PACKAGE / folder)
        for name in engines
        if name in path.read_text()
    ]
    assert named == []


def _package_modules() -> list[str]:
    return sorted(
        module.name
        for module in pkgutil.walk_packages([str(PACKAGE)], prefix="airflow_iceberg_dml.")
        if not module.name.startswith("airflow_iceberg_dml.jobs")
    )


def _operator_classes() -> list[type]:
    from airflow.sdk import BaseOperator

    found = {}
    for name in _package_modules():
        if not name.startswith(("airflow_iceberg_dml.operators", "airflow_iceberg_dml.sensors")):
            continue
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if issubclass(cls, BaseOperator) and cls.__module__.startswith("airflow_iceberg_dml"):
                found[cls.__qualname__] = cls
    return [found[name] for name in sorted(found)]


def _constructor_parameters(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names |= set(inspect.signature(init).parameters)
    return names


@pytest.mark.parametrize("operator", _operator_classes(), ids=lambda cls: cls.__name__)
def test_every_template_field_is_named_as_its_constructor_parameter(operator):
    parameters = _constructor_parameters(operator)
    unnamed = [
        field
        for field in operator.template_fields
        if RENAMED_TEMPLATE_FIELDS.get(field, field) not in parameters
    ]
    assert unnamed == []


def test_there_are_operators_to_check():
    names = {cls.__name__ for cls in _operator_classes()}
    assert {"IcebergDeleteOperator", "IcebergUpdateOperator", "IcebergEraseOperator"} <= names


def _defines(module: str, base: type) -> bool:
    """Whether ``module`` defines a public subclass of ``base`` (a private one, such as the provider's
    hook on a connection already read in ``hooks/connect_session.py``, is no hook of the provider's)."""
    classes = inspect.getmembers(importlib.import_module(module), inspect.isclass)
    public = [cls for name, cls in classes if not name.startswith("_") and cls.__module__ == module]
    return any(issubclass(cls, base) for cls in public)


def test_the_provider_lists_every_hook_operator_sensor_and_trigger_module():
    from airflow.sdk import BaseHook, BaseOperator
    from airflow.triggers.base import BaseTrigger

    bases = {"hooks": BaseHook, "operators": BaseOperator, "sensors": BaseOperator, "triggers": BaseTrigger}
    info = get_provider_info()
    listed = {
        module
        for kind in ("hooks", "operators", "sensors", "triggers")
        for entry in info[kind]
        for module in entry["python-modules"]
    }
    for kind in ("hooks", "operators", "sensors", "triggers"):
        modules = [f"airflow_iceberg_dml.{kind}.{path.stem}" for path in (PACKAGE / kind).glob("*.py")]
        expected = {module for module in modules if _defines(module, bases[kind])}
        assert expected, kind
        assert expected - listed == set(), kind
    for module in listed:
        importlib.import_module(module)


def test_the_provider_reports_this_package_version():
    assert get_provider_info()["versions"] == [airflow_iceberg_dml.__version__]


def _bench_imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in _sources(REPO / "bench"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        imported: set[str] = set()
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench"):
                imported.add(node.module)
                imported |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names if alias.name.startswith("bench")}
        graph[module] = imported
    return {module: imported & graph.keys() for module, imported in graph.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for other in sorted(graph[module]):
            if other == module or other in {"bench"}:
                continue
            if state.get(other) == 1:
                return [*path, module, other]
            if other not in state and (found := visit(other, [*path, module])):
                return found
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module, [])):
            return found
    return None


def test_bench_has_no_import_circle():
    graph = _bench_imports()
    assert "bench.bench_engines" in graph
    assert _cycle(graph) is None


def test_the_circle_check_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


#: The modules that build the SQL text the jobs run: the statements and queries (``sql.py``), a MERGE's
#: (``merge_sql.py``) and the procedure calls (``procedures.py``).
SQL_MODULES = {"sql.py", "merge_sql.py", "procedures.py"}
#: How a text of Spark SQL starts (upper case: error messages such as "MERGE into 't'" are not SQL).
_SQL_START = re.compile(
    r"\s*\(?\s*(SELECT|WITH|EXPLAIN|DELETE FROM|UPDATE|MERGE INTO|INSERT|CALL|ALTER TABLE|CREATE|DROP|"
    r"SHOW|DESCRIBE|REFRESH|TRUNCATE|SET|RESET)\b"
)


def _sql_texts(tree: ast.Module) -> list[tuple[int, str]]:
    """The strings and f-strings of ``tree`` that start as Spark SQL does (docstrings left out)."""
    skipped = {  # docstrings, and the parts of f-strings (each f-string is read whole)
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    } | {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = node.values[0].value
        elif isinstance(node, ast.Constant) and id(node) not in skipped:
            text = node.value
        else:
            continue
        if isinstance(text, str) and _SQL_START.match(text):
            found.append((node.lineno, text))
    return found


def test_the_sql_the_jobs_run_is_written_in_the_sql_modules_only():
    """The README's layout: ``sql.py`` (with ``merge_sql.py`` and ``procedures.py``) holds every SQL text
    a job runs, so that one reading shows how user text is quoted and placed."""
    outside = [
        f"{path.relative_to(REPO)}:{line}: {text[:60]!r}"
        for path in _sources(PACKAGE)
        if path.name not in SQL_MODULES or path.parent != PACKAGE
        for line, text in _sql_texts(_parse(path))
    ]
    assert outside == []


def test_the_sql_check_finds_sql_and_leaves_messages_and_docstrings_alone():
    tree = ast.parse(
        '''"""SELECT in a docstring."""
query = f"SELECT count(*) FROM {table}"
plan = "EXPLAIN " + statement
message = f"MERGE into {table!r}: a column is missing"
'''
    )
    assert [line for line, _ in _sql_texts(tree)] == [2, 3]


def test_a_third_engine_is_one_class_and_one_line(monkeypatch):
    """docs/engines.md: register a class for a connection type; the operators then run their jobs on it."""
    import json
    from types import SimpleNamespace

    from airflow_iceberg_dml.hooks import engines
    from airflow_iceberg_dml.operators.base import JobRun
    from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
    from airflow_iceberg_dml.spec import JobRecord, Outcome

    class InProcessEngine:
        state_key = "iceberg_dml_in_process"
        submitted: ClassVar[list[tuple[str, str]]] = []

        def __init__(self, spark_conn_id, spark_conf=None, task_spark_conf=None):
            self.spark_conn_id = spark_conn_id

        def submit(self, spec, catalog, name, on_started=None):
            if on_started is not None:
                on_started({"job": name})
            self.submitted.append((self.spark_conn_id, name))
            return JobRecord(Outcome.NOOP, spark_app_id="in-process")

        def reattach(self, stored):
            return False

        def on_kill(self):
            pass

        remote_application_id = None

        def failure(self, error):
            raise AssertionError(error)

    monkeypatch.setitem(engines.ENGINES, "in_process", InProcessEngine)  # the one line
    monkeypatch.setenv("AIRFLOW_CONN_TINY", json.dumps({"conn_type": "in_process"}))
    assert isinstance(engines.engine_for("tiny"), InProcessEngine)

    stored: dict[str, object] = {}
    store = SimpleNamespace(set=stored.__setitem__, delete=stored.pop, get=stored.get)
    operator = IcebergDeleteOperator(task_id="d", table="ns.t", where="TRUE", spark_conn_id="tiny")
    context = {"ti": SimpleNamespace(dag_id="dag", task_id="d")}
    record = operator._submit(None, JobRun(context, SimpleNamespace(catalog_config=None)), store)
    assert record == JobRecord(Outcome.NOOP, spark_app_id="in-process")
    assert InProcessEngine.submitted == [("tiny", "iceberg-dml-dag-d")]
    assert stored == {}  # what the job stored for a later try is forgotten once it ended
    assert type(operator._engine) is InProcessEngine


def test_parsing_a_dag_file_does_not_import_the_openlineage_client() -> None:
    """The lineage facets (and the OpenLineage client under them) load when the provider asks for
    lineage, not in every task process and DAG parse; their names still resolve on first use."""
    import subprocess
    import sys

    script = (
        "import importlib.util as u, sys; "
        f"s = u.spec_from_file_location('d', {str(REPO / 'dags' / 'iceberg_dml_backfill.py')!r}); "
        "s.loader.exec_module(u.module_from_spec(s)); "
        "parsed = 'openlineage.client' in sys.modules; "
        "from airflow_iceberg_dml import lineage; "
        "print(parsed, lineage.HAVE_OPENLINEAGE_CLIENT, 'openlineage.client' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.split()[-3:] == ["False", "True", "True"], done.stderr[-2000:]


def test_make_example_runs_every_example_the_docs_name_and_lists_them_without_one() -> None:
    """``make example DAG=<name>`` runs ``dags/<name>.py``'s demo: every name the README and docs give has
    one, and a name without one (or none) gets the list instead of a silent run that does nothing."""
    import re
    import subprocess

    named = {
        name
        for text in [
            (REPO / "README.md").read_text(),
            *(path.read_text() for path in (REPO / "docs").glob("*.md")),
        ]
        for name in re.findall(r"make example\s+DAG=(\w+)", text)
    }
    with_demo = {
        path.stem for path in (REPO / "dags").glob("*.py") if 'if __name__ == "__main__":' in path.read_text()
    }
    assert named
    assert named <= with_demo
    for argument in ([], ["DAG=iceberg_dml_backfill"]):
        command = ["make", "-s", "example", *argument]
        usage = subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True)
        assert usage.returncode == 2
        assert usage.stdout.split("one of:")[1].split() == sorted(with_demo)
