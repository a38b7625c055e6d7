"""The private names of other packages that this package still uses, each with its reason and a version guard.

Everything else goes through public surfaces: the Spark provider's ``SparkSubmitHook`` constructor
(``spark_binary``), ``submit()``, ``on_kill()`` and its logger; pyiceberg's catalogs and its ancestry
helpers. Where no public name does the job, the private one is read here and nowhere else.

Each private name belongs to a :class:`Dependency` with the versions this package was tested with
(``tests/test_compat.py`` fails when the installed version leaves that range or a name moves). On an
untested version, a name is checked before it is used; when it moved, the feature that needs it falls
back, with a warning naming the package, its version and the tested range:

- the spark-submit pid at start (durable re-attach): not recorded, a retry starts its own job;
- a remote driver's application id: unknown, the commit is found by run key only;
- pyiceberg's REST internals (the conditional loadTable of the snapshot sensor): not used at all on an
  untested pyiceberg, the sensor polls with a plain ``load_table``;
- a Spark Connect session's settings in one request (a commit's summary properties): one per key;
- the assets Airflow has linked to an asset alias (whether a task may report its events without its
  turn): not asked, every task reports in turn.
"""

from __future__ import annotations

import importlib.metadata
import logging
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from pyiceberg.catalog.rest import RestCatalog, TableResponse
    from pyiceberg.table import Table
    from requests import HTTPError, Session

    _SparkSubmitHookBase = SparkSubmitHook
else:
    # A mixin at runtime, so that importing this module (the snapshot sensor does) loads no Spark provider.
    _SparkSubmitHookBase = object

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dependency:
    """An installed distribution and the versions whose private names this module was written against."""

    distribution: str
    tested: SpecifierSet

    @property
    def version(self) -> Version | None:
        """The installed version (None when it is not installed or its version cannot be parsed)."""
        text = installed_version(self.distribution)
        try:
            return Version(text) if text is not None else None
        except InvalidVersion:
            return None

    def is_tested(self) -> bool:
        """Whether the installed version is one this package was tested with."""
        version = self.version
        return version is not None and version in self.tested

    def describe(self) -> str:
        return f"{self.distribution} {self.version or 'unknown'} (tested: {self.tested})"


SPARK_PROVIDER = Dependency("apache-airflow-providers-apache-spark", SpecifierSet(">=6.0,<7"))
PYICEBERG = Dependency("pyiceberg", SpecifierSet(">=0.12,<0.13"))


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


_MISSING = object()
_warned: set[str] = set()


def _moved(dependency: Dependency, name: str, fallback: str) -> None:
    """Warn, once per name, that an untested version of ``dependency`` no longer has ``name``."""
    if name not in _warned:
        _warned.add(name)
        log.warning(
            "%s has no %s, which airflow-iceberg-dml uses: %s. Install a tested version.",
            dependency.describe(),
            name,
            fallback,
        )


def _private(owner: object, name: str, dependency: Dependency, fallback: str) -> Any:
    """``owner.name``, or ``_MISSING`` (with a warning) when the installed version no longer has it."""
    value = getattr(owner, name, _MISSING)
    if value is _MISSING:
        _moved(dependency, f"{type(owner).__name__}.{name}", fallback)
    return value


# -- apache-airflow-providers-apache-spark --------------------------------------------------------------


class SparkSubmitHookCompat(_SparkSubmitHookBase):
    """Mixin for the provider's ``SparkSubmitHook`` (listed after it among the bases): tells ``on_spawned``
    the spark-submit pid as soon as it runs, and gives the application id parsed for a remote driver."""

    def __init__(self, *, on_spawned: Callable[[int], None] | None = None, **kwargs: Any) -> None:
        self._on_spawned = on_spawned if on_spawned is not None and spawn_notice_available() else None
        #: The Spark connection id the provider looks up (``conn_id``, else its ``default_conn_name``),
        #: kept here because the provider keeps its copy private (``_conn_id``; checked with 6.3.4).
        self.requested_conn_id: str = kwargs.get("conn_id", type(self).default_conn_name)
        super().__init__(**kwargs)

    # Private: submit() starts the process and calls this before reading any output; nothing public
    # sees the pid before the job could outlive a killed worker.
    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        if self._on_spawned is not None:
            process = _private(self, "_submit_sp", SPARK_PROVIDER, "durable re-attach is off")
            if process is not _MISSING and process is not None:
                self._on_spawned(process.pid)
        super()._process_spark_submit_log(itr)

    @property
    def remote_application_id(self) -> str | None:
        """The YARN or Kubernetes application id spark-submit printed for a remote driver, if any."""
        # Private: the provider parses the id from spark-submit's output and has no accessor for it.
        fallback = "a remote driver's commit is found by run key only"
        for name in ("_yarn_application_id", "_kubernetes_application_id"):
            value = _private(self, name, SPARK_PROVIDER, fallback)
            if isinstance(value, str) and value:
                return value
        return None


#: Methods the compat hook overrides; an override of a renamed method would silently never run.
SPARK_PROVIDER_OVERRIDES = ("_process_spark_submit_log",)
#: Instance attributes it reads.
SPARK_PROVIDER_ATTRIBUTES = ("_submit_sp", "_yarn_application_id", "_kubernetes_application_id")


def spawn_notice_available() -> bool:
    """Whether the provider still has the method that reports the pid (checked on untested versions)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    if SPARK_PROVIDER.is_tested():
        return True
    for name in SPARK_PROVIDER_OVERRIDES:
        if not callable(getattr(SparkSubmitHook, name, None)):
            _moved(SPARK_PROVIDER, f"SparkSubmitHook.{name}", "durable re-attach is off")
            return False
    return True


# -- pyiceberg ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestLoadTable:
    """What a conditional loadTable needs of pyiceberg's REST catalog, none of it public there."""

    #: The catalog's HTTP session, with its authentication and headers.
    session: Session
    #: The table's loadTable URL.
    url: str
    #: Raises pyiceberg's own error for a non-2xx response.
    raise_error: Callable[[HTTPError], None]
    #: Builds the table from a loadTable response, as ``load_table`` does.
    to_table: Callable[[TableResponse], Table]


#: The private names :func:`rest_load_table` uses, as ``module:name``.
PYICEBERG_PRIVATE_NAMES = (
    "pyiceberg.catalog.rest:RestCatalog._session",
    "pyiceberg.catalog.rest:RestCatalog._split_identifier_for_path",
    "pyiceberg.catalog.rest:RestCatalog._response_to_table",
    "pyiceberg.catalog.rest.response:_handle_non_200_response",
)


def rest_load_table(catalog: RestCatalog, table_name: str) -> RestLoadTable | None:
    """The REST internals for a conditional loadTable of ``table_name``; None on an untested pyiceberg.

    Private: pyiceberg has no conditional ``load_table`` (``If-None-Match``), so the request is made
    with its session and its response turned into a table with its own code.
    """
    if not PYICEBERG.is_tested():
        if "rest" not in _warned:
            _warned.add("rest")
            log.info("%s: the snapshot sensor polls REST tables with load_table.", PYICEBERG.describe())
        return None
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.rest import Endpoints
    from pyiceberg.catalog.rest.response import _handle_non_200_response
    from pyiceberg.exceptions import NoSuchTableError

    identifier = Catalog.identifier_to_tuple(table_name)
    path = catalog._split_identifier_for_path(table_name)

    def raise_error(error: HTTPError) -> None:
        _handle_non_200_response(error, {404: NoSuchTableError})

    def to_table(response: TableResponse) -> Table:
        return catalog._response_to_table(identifier, response)

    return RestLoadTable(
        session=catalog._session,
        url=catalog.url(Endpoints.load_table, prefixed=True, **path),
        raise_error=raise_error,
        to_table=to_table,
    )


# -- pyspark (Spark Connect client) --------------------------------------------------------------------

PYSPARK_CLIENT = Dependency("pyspark", SpecifierSet(">=4.1,<4.2"))


def bound_connect_retries(spark: Any, max_retries: int, max_backoff_ms: int) -> bool:
    """Make a Spark Connect session give up on an unreachable server after ``max_retries`` retries
    whose waits grow to ``max_backoff_ms`` at most; False when this PySpark cannot (the client keeps
    its default, which retries for minutes).

    Why private: the session keeps its client in ``_client`` (PySpark 4.1); the client's
    ``set_retry_policies`` and ``DefaultPolicy`` are public, but the builder takes no retry settings.
    """
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client = _private(spark, "_client", PYSPARK_CLIENT, "a lost server is noticed only after minutes")
    setter = getattr(client, "set_retry_policies", None) if client is not _MISSING else None
    if setter is None:
        return False
    setter([DefaultPolicy(max_retries=max_retries, max_backoff=max_backoff_ms)])
    return True


def set_confs(spark: Any, settings: Mapping[str, str]) -> None:
    """Set ``settings`` in ``spark``'s session: over Spark Connect in one request, else one per key.

    Why private: PySpark's public ``conf.set`` and ``conf.unset`` send a request per key. A commit's
    summary properties are about ten keys, set before each statement and unset after it while the
    table's turn is held, so twenty requests to a busy server per job. Spark Connect's config request
    takes many keys at once; PySpark 4.1's ``RuntimeConf`` sends it from ``_set_all`` (its session
    builder's). Classic Spark (a local call per key) and an untested PySpark go one key at a time.
    """
    set_all = _connect_conf(spark, "_set_all")
    if set_all is None:
        for key, value in settings.items():
            spark.conf.set(key, value)
        return
    set_all(dict(settings), silent=False)


def get_confs(spark: Any, keys: Iterable[str]) -> dict[str, str | None]:
    """The values of ``keys`` in ``spark``'s session (None: not set), in one request over Spark Connect.

    Why private: PySpark's public ``conf.get`` sends a request per key, and a job's session is checked
    (the server's extensions, the catalog, the application id) while the table's turn is held. The
    request is built and sent as :func:`unset_confs` sends its own: a default-less get of many keys.
    """
    keys = list(keys)
    client = _connect_conf(spark, "_client")
    if client is None:
        return {key: spark.conf.get(key, None) for key in keys}
    from pyspark.sql.connect import proto

    pairs = [proto.KeyValue(key=key) for key in keys]
    operation = proto.ConfigRequest.Operation(
        get_with_default=proto.ConfigRequest.GetWithDefault(pairs=pairs)
    )
    values = dict(client.config(operation).pairs)
    return {key: values.get(key) for key in keys}


def unset_confs(spark: Any, keys: Iterable[str]) -> None:
    """Unset ``keys`` in ``spark``'s session, in one request over Spark Connect (see :func:`set_confs`).

    Why private: PySpark has no method for it; the request is built from PySpark's own protobuf
    classes and sent by the conf's client (``RuntimeConf._client``), as ``conf.unset`` sends one key.
    """
    keys = list(keys)
    client = _connect_conf(spark, "_client")
    if client is None:
        for key in keys:
            spark.conf.unset(key)
        return
    from pyspark.sql.connect import proto

    operation = proto.ConfigRequest.Operation(unset=proto.ConfigRequest.Unset(keys=keys))
    for warning in client.config(operation).warnings:
        warnings.warn(warning, stacklevel=2)


def _connect_conf(spark: Any, name: str) -> Any:
    """``spark.conf.<name>`` of a Spark Connect session; None for a classic session or when moved."""
    conf = spark.conf
    if not type(conf).__module__.startswith("pyspark.sql.connect."):
        return None
    value = _private(conf, name, PYSPARK_CLIENT, "the session's settings are sent one request per key")
    return None if value is _MISSING else value


def without_finalizer_close(spark: Any) -> None:
    """Let the garbage collector finalize a Spark Connect session without closing its client.

    Why: PySpark's ``SparkSession.__del__`` closes the client, and closing a client shuts down and
    joins the one thread pool that every session's executions share (``ExecutePlanResponse
    ReattachableIterator.shutdown``). When the cyclic collector happens to finalize an old session on
    one of that pool's own threads, the thread joins itself and the process hangs for good (seen in a
    worker whose server was killed mid-job, then restarted). The jobs stop every session they open
    explicitly (``stop()`` closes the client, on the job's own thread), so the finalizer has nothing
    left to do: the session is given a subclass whose ``__del__`` does nothing.
    """
    session_type = type(spark)
    if session_type not in _QUIET:
        _QUIET[session_type] = type(
            session_type.__name__, (session_type,), {"__del__": _no_close, "__module__": __name__}
        )
    spark.__class__ = _QUIET[session_type]


#: PySpark's session class -> its subclass with the quiet finalizer.
_QUIET: dict[type, type] = {}


def _no_close(self: Any) -> None:
    """Nothing: the session was stopped (and its client closed) by the job that opened it."""


# -- apache-airflow-task-sdk ---------------------------------------------------------------------------

TASK_SDK = Dependency("apache-airflow-task-sdk", SpecifierSet(">=1.3,<1.4"))


def assets_of_alias(alias_name: str) -> set[str] | None:
    """The URIs of the assets Airflow has linked to the asset alias ``alias_name`` (by its earlier
    events), asked of Airflow's API server from the running task; None when it cannot be asked.

    Why private: the task SDK resolves an alias for a task's inlets with its ``GetAssetsByAlias``
    request to the supervisor (``TASK_SDK``), and offers no public call for it. Outside a task, or where
    the request is missing or refused, the answer is None and the caller assumes nothing is linked.
    """
    try:
        from airflow.sdk.execution_time.comms import AssetsByAliasResult, GetAssetsByAlias
        from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS
    except ImportError:  # Airflow 3.2's task SDK, or no task running: report in turn
        return None
    try:
        response = SUPERVISOR_COMMS.send(GetAssetsByAlias(alias_name=alias_name))
    except Exception as error:  # noqa: BLE001 - a question to save a wait: never fail the task over it
        log.debug("Could not ask Airflow which assets alias %r is linked to: %s", alias_name, error)
        return None
    if not isinstance(response, AssetsByAliasResult):
        return None
    return {asset.uri for asset in response.assets}
