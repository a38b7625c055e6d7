"""The docker-compose topology, natively and on loopback: S3, an Iceberg REST catalog, Spark standalone.

Each server starts once per session, from jars Maven fetches into ``.jars/servers`` (cached across
runs), with a bounded start-up wait; it is stopped at the end of the session whatever happened.
Tests reach the servers only through Airflow connections (``AIRFLOW_CONN_*``), as a user would:

- ``spark_cluster``: a ``spark`` connection to ``spark://127.0.0.1:<port>``, client deploy mode;
- ``iceberg_rest``: an ``iceberg`` connection to the REST catalog (login/password = OAuth2 client
  credential, extras = warehouse, io-impl and ``s3.*``), warehouse on S3 through ``S3FileIO``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from airflow_iceberg_dml import runtime
from airflow_iceberg_dml.catalog_config import S3_FILE_IO
from tests.cluster.servers import (
    LOOPBACK,
    ServerProcess,
    fetch_classpath,
    fetch_jar,
    free_port,
    http_status,
    require_tool,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

SPARK_CONN_ID = "spark_cluster"
REST_CONN_ID = "iceberg_rest"
BUCKET = "warehouse"
REGION = "us-east-1"
#: Bounded start-up waits: generous, because the two CI cores are shared by every JVM here.
STARTUP_TIMEOUT_S = 180.0

S3PROXY_VERSION = "4.1.0"
#: Iceberg's REST catalog adapter and servlet (the code of the apache/iceberg-rest-fixture image)
#: and what they need at run time. The image's shaded runtime jar is not published (iceberg-open-api
#: 1.11.0 has only a thin test-fixtures jar), and its RESTCatalogServer listens on every interface:
#: LoopbackRestCatalog.java serves the same adapter on 127.0.0.1.
REST_CATALOG_CLASSPATH = (
    f"org.apache.iceberg:iceberg-core:{runtime.ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-core:{runtime.ICEBERG_VERSION}:tests",
    f"org.apache.iceberg:iceberg-aws:{runtime.ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-aws-bundle:{runtime.ICEBERG_VERSION}",
    "org.eclipse.jetty.ee10:jetty-ee10-servlet:12.0.25",
    f"org.xerial:sqlite-jdbc:{runtime.SQLITE_JDBC_VERSION}",
    "org.slf4j:slf4j-simple:2.0.17",
)
REST_LAUNCHER = Path(__file__).with_name("LoopbackRestCatalog.java")


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    data_dir: Path
    process: ServerProcess

    @property
    def warehouse(self) -> str:
        return f"s3://{BUCKET}/"


@dataclass(frozen=True)
class RestCatalog:
    uri: str
    client_id: str
    client_secret: str
    process: ServerProcess


@dataclass(frozen=True)
class SparkCluster:
    master_url: str
    master_web_url: str
    work_dir: Path
    local_dir: Path
    master: ServerProcess
    worker: ServerProcess

    @property
    def port(self) -> int:
        return int(self.master_url.rsplit(":", 1)[1])

    def status(self) -> dict[str, object]:
        """The master's JSON status page (workers, running and completed applications)."""
        import urllib.request

        with urllib.request.urlopen(f"{self.master_web_url}/json/", timeout=5) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]


def _java() -> str:
    return require_tool("java", "openjdk-17-jre-headless", "the Spark and server JVMs")


def _server_env(**extra: str) -> dict[str, str]:
    """A minimal environment for a server: no Airflow connections, no AWS profile of the user."""
    keep = ("PATH", "HOME", "LANG", "JAVA_HOME", "TZ")
    return {**{key: os.environ[key] for key in keep if key in os.environ}, **extra}


@pytest.fixture(scope="session")
def cluster_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Logs, data and work folders of the servers; removed at the end of the session."""
    folder = tmp_path_factory.mktemp("cluster")
    folder.chmod(0o700)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server(cluster_state: Path) -> Iterator[S3Server]:
    """S3Proxy on 127.0.0.1 with a filesystem backend, SigV4 authentication and one bucket."""
    jar = fetch_jar(
        f"org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies",
        f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar",
    )
    home = cluster_state / "s3proxy"
    data_dir = home / "data"
    data_dir.mkdir(parents=True)
    port = free_port()
    access_key = "AKIA" + secrets.token_hex(8).upper()
    secret_key = "s3-secret-" + secrets.token_urlsafe(24)
    config = home / "s3proxy.conf"
    # The server's own credential lives in a 0600 file, not on its command line.
    descriptor = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(
            f"s3proxy.endpoint=http://{LOOPBACK}:{port}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={access_key}\n"
            f"s3proxy.credential={secret_key}\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={data_dir}\n"
        )
    process = ServerProcess.start(
        "s3proxy",
        [_java(), "-Xmx256m", "-jar", str(jar), "--properties", str(config)],
        env=_server_env(),
        log_dir=cluster_state,
    )
    endpoint = f"http://{LOOPBACK}:{port}"
    try:
        process.wait_until(
            lambda: http_status(endpoint) is not None, timeout_s=STARTUP_TIMEOUT_S, what="HTTP"
        )
        from pyarrow import fs

        s3 = fs.S3FileSystem(
            access_key=access_key,
            secret_key=secret_key,
            endpoint_override=endpoint,
            scheme="http",
            region=REGION,
            allow_bucket_creation=True,
        )
        s3.create_dir(BUCKET)
        yield S3Server(endpoint, access_key, secret_key, data_dir, process)
    finally:
        process.stop()


@pytest.fixture(scope="session")
def rest_catalog(cluster_state: Path, s3_server: S3Server) -> Iterator[RestCatalog]:
    """Iceberg's REST catalog server on 127.0.0.1: JDBC (SQLite) backend, warehouse on S3."""
    require_tool("javac", "openjdk-17-jdk-headless", "it compiles the REST catalog launcher")
    classpath = fetch_classpath(f"iceberg-rest-{runtime.ICEBERG_VERSION}", REST_CATALOG_CLASSPATH)
    home = cluster_state / "rest"
    home.mkdir()
    port = free_port()
    client_id = "airflow-" + secrets.token_hex(4)
    client_secret = "rest-secret-" + secrets.token_urlsafe(24)
    env = _server_env(
        REST_PORT=str(port),
        REST_CLIENT_ID=client_id,
        REST_CLIENT_SECRET=client_secret,
        CATALOG_URI=f"jdbc:sqlite:{home / 'catalog.db'}",
        CATALOG_WAREHOUSE=s3_server.warehouse,
        CATALOG_IO__IMPL=S3_FILE_IO,
        CATALOG_S3_ENDPOINT=s3_server.endpoint,
        CATALOG_S3_PATH__STYLE__ACCESS="true",
        CATALOG_CLIENT_REGION=REGION,
        AWS_ACCESS_KEY_ID=s3_server.access_key,
        AWS_SECRET_ACCESS_KEY=s3_server.secret_key,
        AWS_REGION=REGION,
    )
    process = ServerProcess.start(
        "iceberg-rest",
        [_java(), "-Xmx384m", "-cp", f"{classpath}/*", str(REST_LAUNCHER)],
        env=env,
        log_dir=cluster_state,
        cwd=home,
    )
    uri = f"http://{LOOPBACK}:{port}"
    try:
        # Every call but the token exchange needs a token: 401 means the catalog is serving.
        process.wait_until(
            lambda: http_status(f"{uri}/v1/config") == 401, timeout_s=STARTUP_TIMEOUT_S, what="REST API"
        )
        yield RestCatalog(uri, client_id, client_secret, process)
    finally:
        process.stop()


def _alive_workers(web_url: str) -> int:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=2) as response:
            return int(json.loads(response.read()).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@pytest.fixture(scope="session")
def spark_cluster(cluster_state: Path) -> Iterator[SparkCluster]:
    """A Spark standalone master and one worker (2 cores, 2 GB) from the pyspark distribution."""
    _java()
    spark_home = runtime.bundled_spark_home()
    spark_class = str(spark_home / "bin" / "spark-class")
    home = cluster_state / "spark"
    work_dir, local_dir, conf_dir = home / "work", home / "local", home / "conf"
    for folder in (work_dir, local_dir, conf_dir):
        folder.mkdir(parents=True)
    master_port, master_web, worker_port, worker_web = (free_port() for _ in range(4))
    env = _server_env(
        SPARK_HOME=str(spark_home),
        SPARK_CONF_DIR=str(conf_dir),
        # Web UIs bind to SPARK_LOCAL_IP (0.0.0.0 otherwise); executors inherit it from the worker.
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_LOCAL_DIRS=str(local_dir),
        SPARK_DAEMON_MEMORY="512m",
        # The REST submission server would take the fixed port 6066; Python jobs cannot use it anyway.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    master_url = f"spark://{LOOPBACK}:{master_port}"
    master_web_url = f"http://{LOOPBACK}:{master_web}"
    master = ServerProcess.start(
        "spark-master",
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            *("--host", LOOPBACK, "--port", str(master_port), "--webui-port", str(master_web)),
        ],
        env=env,
        log_dir=cluster_state,
    )
    worker = ServerProcess.start(
        "spark-worker",
        [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            *("--host", LOOPBACK, "--port", str(worker_port), "--webui-port", str(worker_web)),
            *("--cores", "2", "--memory", "2g", "--work-dir", str(work_dir)),
            master_url,
        ],
        env=env,
        log_dir=cluster_state,
    )
    try:
        master.wait_until(
            lambda: http_status(master_web_url) == 200, timeout_s=STARTUP_TIMEOUT_S, what="web UI"
        )
        worker.wait_until(
            lambda: _alive_workers(master_web_url) >= 1,
            timeout_s=STARTUP_TIMEOUT_S,
            what="registration with the master",
        )
        yield SparkCluster(master_url, master_web_url, work_dir, local_dir, master, worker)
    finally:
        worker.stop()
        master.stop()


def spark_connection(cluster: SparkCluster, deploy_mode: str = "client") -> str:
    """The ``spark`` connection of the cluster, as an ``AIRFLOW_CONN_*`` value."""
    return json.dumps(
        {
            "conn_type": "spark",
            "host": f"spark://{LOOPBACK}",
            "port": cluster.port,
            "extra": {"deploy-mode": deploy_mode},
        }
    )


def iceberg_rest_connection(catalog: RestCatalog, s3: S3Server) -> str:
    """The ``iceberg`` connection of the REST catalog, as an ``AIRFLOW_CONN_*`` value."""
    return json.dumps(
        {
            "conn_type": "iceberg",
            "host": catalog.uri,
            "login": catalog.client_id,
            "password": catalog.client_secret,
            "extra": {
                "type": "rest",
                "warehouse": s3.warehouse,
                "io-impl": S3_FILE_IO,
                "s3.endpoint": s3.endpoint,
                "s3.path-style-access": "true",
                "s3.region": REGION,
                "s3.access-key-id": s3.access_key,
                "s3.secret-access-key": s3.secret_key,
            },
        }
    )


@pytest.fixture
def driver_tmp(cluster_state: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's temporary folder for everything the Airflow side and the driver write.

    The hook's private folder (spec, properties file) and the driver's Spark local dirs land here,
    so that a test can look at what was left behind. The driver binds to loopback only.
    """
    folder = Path(tempfile.mkdtemp(prefix="driver-", dir=cluster_state))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(folder))
    monkeypatch.setenv("SPARK_LOCAL_IP", LOOPBACK)
    return folder


@pytest.fixture
def on_spark_cluster(
    spark_cluster: SparkCluster, driver_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> SparkCluster:
    """The ``spark_cluster`` connection exists for this test."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}", spark_connection(spark_cluster))
    return spark_cluster


@pytest.fixture
def on_rest_catalog(
    rest_catalog: RestCatalog, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> RestCatalog:
    """The ``iceberg_rest`` connection exists for this test."""
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{REST_CONN_ID.upper()}", iceberg_rest_connection(rest_catalog, s3_server)
    )
    return rest_catalog
