"""Static checks of ``docker-compose.yaml`` and the Dockerfiles it builds.

No Docker engine runs on the development machines, so the stack is proven by reading it: the file is
valid Compose, every address a service is configured with names a service of the file and a port that
service listens on, start-up waits for what each service talks to, the versions match the ones the
package is built for (``airflow_iceberg_dml.runtime``), images are pinned and long-running services
report their health.

Each check is a plain function returning a list of problems: empty on the real file, and non-empty on
each in-memory broken copy of it (the second half of this module), so that a check that cannot fail
does not pass unnoticed.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from airflow_iceberg_dml.runtime import (
    DEFAULT_ARTIFACTS,
    ICEBERG_AWS_BUNDLE,
    ICEBERG_SPARK_RUNTIME,
    ICEBERG_VERSION,
    JAR_CACHE_ENV,
    JARS_ENV,
    S3_ARTIFACTS,
    SCALA_BINARY_VERSION,
    SPARK_MINOR_VERSION,
    SPARK_VERSION,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

REPO_ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yaml"
#: schema/compose-spec.json of compose-spec/compose-spec; source and licence in tests/data/README.md.
COMPOSE_SCHEMA_FILE = REPO_ROOT / "tests" / "data" / "compose-spec.json"

AIRFLOW_DOCKERFILE = "docker/airflow/Dockerfile"
SPARK_DOCKERFILE = "docker/spark/Dockerfile"
AIRFLOW_BASE_IMAGE = "apache/airflow"
SPARK_BASE_IMAGE = "apache/spark"
ICEBERG_REST_IMAGE = "apache/iceberg-rest-fixture"
#: The Spark image the stack builds is tagged with the versions it carries.
SPARK_IMAGE_TAG = f"{SPARK_VERSION}-scala{SCALA_BINARY_VERSION}-iceberg{ICEBERG_VERSION}"
#: Spark 4 runs on Java 17 or 21; the package is verified with 17.
SPARK_BASE_TAG_PREFIX = f"{SPARK_VERSION}-scala{SCALA_BINARY_VERSION}-java17-"
#: The connections the operators use when none is given.
REQUIRED_CONNECTIONS = ("AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_CONN_ICEBERG_DEFAULT")
#: Airflow commands whose containers run task code or triggers, and so use the connections.
TASK_RUNNING_COMMANDS = frozenset({"scheduler", "triggerer", "celery worker"})
AIRFLOW_DAGS_TARGET = "/opt/airflow/dags"

# Schemes whose URLs are network addresses, with the port a client assumes when none is written.
# Others (s3://bucket, jdbc:sqlite:..., file://) do not name a host.
NETWORK_SCHEME_PORTS = {"http": 80, "https": 443, "spark": 7077, "postgresql": 5432, "postgres": 5432}
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "0.0.0.0", "::1"})
READY_CONDITIONS = frozenset({"service_healthy", "service_completed_successfully"})

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
_INTERPOLATION = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}")

Compose = dict[str, Any]
Service = dict[str, Any]


@dataclass
class Stack:
    """The parsed compose file and the text of each Dockerfile it builds, keyed as the file names them."""

    compose: Compose
    dockerfiles: dict[str, str]


# ---------------------------------------------------------------------------------------------------
# Reading the file


def load_compose(path: Path = COMPOSE_FILE) -> Compose:
    with path.open(encoding="utf-8") as stream:
        loaded = yaml.safe_load(stream)
    assert isinstance(loaded, dict), f"{path} is not a mapping"
    return loaded


def load_dockerfiles(compose: Compose, root: Path = REPO_ROOT) -> dict[str, str]:
    """Text of every Dockerfile a service builds; a missing one is left out (``image_problems`` says so)."""
    texts: dict[str, str] = {}
    for service in _services(compose).values():
        dockerfile = _dockerfile_of(service)
        if dockerfile is None:
            continue
        build = service["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        path = root / str(context) / dockerfile
        if path.is_file():
            texts[dockerfile] = path.read_text(encoding="utf-8")
    return texts


def interpolate(text: str) -> str:
    """Compose variable substitution with no variable set: ``${X:-default}`` gives the default."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group("op") in {"-", ":-"}:
            return match.group("arg")
        return ""

    return _INTERPOLATION.sub(substitute, text)


def _services(compose: Compose) -> dict[str, Service]:
    services = compose.get("services") or {}
    return {name: service or {} for name, service in services.items()}


def _environment(service: Service) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in raw)
        return {key: interpolate(value) for key, value in pairs}
    return {key: interpolate("" if value is None else str(value)) for key, value in raw.items()}


def _as_strings(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [interpolate(str(item)) for item in value]
    return [interpolate(str(value))]


def _command(service: Service) -> str:
    return " ".join(_as_strings(service.get("command")))


def _healthcheck_test(service: Service) -> list[str]:
    return _as_strings((service.get("healthcheck") or {}).get("test"))


def _depends_on(service: Service) -> dict[str, str]:
    """Dependency name to its condition; the short list form means ``service_started``."""
    raw = service.get("depends_on") or {}
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in raw.items()}


def _dockerfile_of(service: Service) -> str | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return "Dockerfile"
    return str(build.get("dockerfile", "Dockerfile"))


def _port_numbers(spec: Any) -> set[int]:
    """Container ports of one ``ports`` or ``expose`` entry, e.g. ``"8081:8080"``, ``"5432/tcp"``."""
    if isinstance(spec, dict):
        return {int(spec["target"])} if "target" in spec else set()
    container = interpolate(str(spec)).split("/", 1)[0].rsplit(":", 1)[-1]
    first, _, last = container.partition("-")
    return set(range(int(first), int(last or first) + 1))


def _listening_ports(service: Service) -> set[int]:
    """Ports the service listens on: its ``ports`` (container side), ``expose``, and its healthcheck URLs.

    A healthcheck that succeeds against ``localhost:<port>`` proves something listens there.
    """
    ports: set[int] = set()
    for spec in [*(service.get("ports") or []), *(service.get("expose") or [])]:
        ports |= _port_numbers(spec)
    for argument in _healthcheck_test(service):
        for url in _URL.findall(argument):
            parts = urlsplit(url)
            if parts.hostname in LOCAL_HOSTS and parts.port is not None:
                ports.add(parts.port)
    return ports


def _one_shot_services(compose: Compose) -> set[str]:
    """Services that others wait for to finish: they are meant to exit, so they report no health."""
    return {
        name
        for service in _services(compose).values()
        for name, condition in _depends_on(service).items()
        if condition == "service_completed_successfully"
    }


def _address(url: str) -> tuple[str, int | None] | None:
    """Host and port of a network URL (the scheme's usual port when none is written); None for others."""
    parts = urlsplit(url.rstrip(",;)"))
    default_port = NETWORK_SCHEME_PORTS.get(parts.scheme.lower().split("+", 1)[0])
    if default_port is None or not parts.hostname:
        return None
    return parts.hostname, parts.port or default_port


def _connections(service: Service) -> dict[str, str]:
    return {key: value for key, value in _environment(service).items() if key.startswith("AIRFLOW_CONN_")}


def _connection_addresses(raw: str) -> list[tuple[str, str, int | None]]:
    """(what, host, port) for the connection's host and for every network URL among its extras."""
    connection = json.loads(raw)
    host = str(connection.get("host") or "")
    port = connection.get("port")
    if "://" in host:
        parts = urlsplit(host)
        default_port = NETWORK_SCHEME_PORTS.get(parts.scheme.lower())
        addresses = [("host", parts.hostname or "", port or parts.port or default_port)]
    else:
        addresses = [("host", host, port)]
    extra = connection.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    for key, value in extra.items():
        address = _address(value) if isinstance(value, str) and "://" in value else None
        if address is not None:
            addresses.append((f"extra {key!r}", *address))
    return addresses


def _endpoint_problem(services: dict[str, Service], where: str, host: str, port: int | None) -> str | None:
    if host not in services:
        return f"{where} names host {host!r}, which is not a service in docker-compose.yaml"
    listening = _listening_ports(services[host])
    if port is None:
        return f"{where} names {host!r} without a port"
    if port not in listening:
        return f"{where} uses {host}:{port}, but {host!r} listens on {sorted(listening)}"
    return None


def _service_urls(service: Service) -> Iterator[tuple[str, str]]:
    """(where, url) for every URL in the service's environment (except connections) and command."""
    for key, value in _environment(service).items():
        if not key.startswith("AIRFLOW_CONN_"):
            for url in _URL.findall(value):
                yield f"environment {key}", url
    for url in _URL.findall(_command(service)):
        yield "command", url


def _talks_to(services: dict[str, Service], name: str) -> set[str]:
    """Other services this one is configured to reach (connections count where task code runs)."""
    service = services[name]
    peers = set()
    for _, url in _service_urls(service):
        address = _address(url)
        if address is not None and address[0] in services:
            peers.add(address[0])
    if _command(service) in TASK_RUNNING_COMMANDS:
        for raw in _connections(service).values():
            try:
                peers |= {host for _, host, _ in _connection_addresses(raw) if host in services}
            except json.JSONDecodeError:
                continue
    peers.discard(name)
    return peers


def _waits_for(services: dict[str, Service], name: str, *, ready_only: bool) -> set[str]:
    """Services started before this one, following depends_on (only ready-conditions if asked)."""
    seen: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        for dependency, condition in _depends_on(services.get(current, {})).items():
            if ready_only and condition not in READY_CONDITIONS:
                continue
            if dependency not in seen:
                seen.add(dependency)
                pending.append(dependency)
    return seen


def _image_reference_problem(reference: str) -> str | None:
    if "@sha256:" in reference:
        return None
    last_part = reference.rsplit("/", 1)[-1]
    if ":" not in last_part:
        return f"image {reference!r} has no tag (Docker would take 'latest')"
    if last_part.rsplit(":", 1)[1] == "latest":
        return f"image {reference!r} is not pinned ('latest')"
    return None


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per logical line: continuations joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    buffer = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not buffer):
            continue
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        logical = (buffer + stripped).strip()
        buffer = ""
        if logical:
            keyword, _, arguments = logical.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def _base_images(text: str) -> list[str]:
    """Images named by FROM lines; earlier build stages and ``scratch`` are not images."""
    images: list[str] = []
    stages: set[str] = {"scratch"}
    for keyword, arguments in _dockerfile_instructions(text):
        if keyword != "FROM":
            continue
        words = [word for word in arguments.split() if not word.startswith("--")]
        if len(words) >= 3 and words[1].lower() == "as":
            stages.add(words[2])
        if words and words[0] not in stages:
            images.append(words[0])
    return images


def _env_values(text: str, name: str) -> list[tuple[int, str]]:
    """(instruction index, value) of every ``ENV name=value`` in the Dockerfile."""
    found = []
    for index, (keyword, arguments) in enumerate(_dockerfile_instructions(text)):
        if keyword == "ENV":
            for match in re.finditer(rf"(?:^|\s){re.escape(name)}=(\S+)", arguments):
                found.append((index, match.group(1).strip("\"'")))
    return found


def _tag(reference: str) -> str:
    last_part = reference.rsplit("/", 1)[-1]
    return last_part.rsplit(":", 1)[1] if ":" in last_part else ""


def _repository(reference: str) -> str:
    head, _, last_part = reference.rpartition("/")
    name = last_part.split(":", 1)[0]
    return f"{head}/{name}" if head else name


# ---------------------------------------------------------------------------------------------------
# The checks


def schema_problems(compose: Compose, schema: dict[str, Any]) -> list[str]:
    """The file is valid against the Compose Specification's JSON Schema."""
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(str(part) for part in error.absolute_path) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(compose), key=lambda error: list(error.absolute_path))
    ]


def connection_problems(compose: Compose) -> list[str]:
    """Every ``AIRFLOW_CONN_*`` is JSON whose host and network extras name a service and a port it serves."""
    services = _services(compose)
    problems: list[str] = []
    found: set[str] = set()
    for name, service in services.items():
        for variable, raw in _connections(service).items():
            found.add(variable)
            try:
                addresses = _connection_addresses(raw)
            except (json.JSONDecodeError, AttributeError) as error:
                problems.append(f"{name}: {variable} is not a JSON connection ({error})")
                continue
            for what, host, port in addresses:
                problem = _endpoint_problem(services, f"{name}: {variable} {what}", host, port)
                if problem is not None:
                    problems.append(problem)
    problems.extend(
        f"no service defines {variable}, the operators' default connection"
        for variable in REQUIRED_CONNECTIONS
        if variable not in found
    )
    return problems


def endpoint_problems(compose: Compose) -> list[str]:
    """Every network URL in a service's environment or command names a service and a port it serves."""
    services = _services(compose)
    problems: list[str] = []
    for name, service in services.items():
        for where, url in _service_urls(service):
            address = _address(url)
            if address is None or address[0] in LOCAL_HOSTS:
                continue
            problem = _endpoint_problem(services, f"{name}: {where}", *address)
            if problem is not None:
                problems.append(problem)
    return problems


def dependency_problems(compose: Compose) -> list[str]:
    """depends_on names existing services, without cycles, with conditions the target can meet."""
    services = _services(compose)
    problems: list[str] = []
    for name, service in services.items():
        for dependency, condition in _depends_on(service).items():
            if dependency not in services:
                problems.append(f"{name} depends on {dependency!r}, which is not a service")
                continue
            target = services[dependency]
            if condition == "service_healthy" and not _healthcheck_test(target):
                problems.append(f"{name} waits for {dependency} to be healthy, but it has no healthcheck")
            if condition == "service_completed_successfully" and target.get("restart") in {
                "always",
                "unless-stopped",
            }:
                problems.append(f"{name} waits for {dependency} to finish, but it restarts forever")
        if name in _waits_for(services, name, ready_only=False):
            problems.append(f"{name} depends on itself through depends_on (a cycle)")
    return problems


def startup_order_problems(compose: Compose) -> list[str]:
    """Each service starts only once every service it talks to is healthy (or, for one-shots, done).

    A service that the other one itself waits for is exempt: the address is then shared configuration
    it carries (the one-shot Airflow init shares the API server's URL with the other Airflow services).
    """
    services = _services(compose)
    problems: list[str] = []
    for name in services:
        ready_before = _waits_for(services, name, ready_only=True)
        for peer in sorted(_talks_to(services, name)):
            if peer in ready_before or name in _waits_for(services, peer, ready_only=False):
                continue
            problems.append(
                f"{name} talks to {peer} but does not wait for it (depends_on with service_healthy, "
                "directly or through another service)"
            )
    return problems


def image_problems(compose: Compose, dockerfiles: dict[str, str]) -> list[str]:
    """Every image, and every base image of the Dockerfiles built, is pinned to a tag other than latest."""
    problems: list[str] = []
    for name, service in _services(compose).items():
        image = service.get("image")
        dockerfile = _dockerfile_of(service)
        if image is None and dockerfile is None:
            problems.append(f"{name} has neither an image nor a build")
        if image is not None:
            problem = _image_reference_problem(interpolate(str(image)))
            if problem is not None:
                problems.append(f"{name}: {problem}")
        if dockerfile is not None and dockerfile not in dockerfiles:
            problems.append(f"{name} builds {dockerfile}, which does not exist")
    for path, text in sorted(dockerfiles.items()):
        bases = _base_images(text)
        if not bases:
            problems.append(f"{path} has no FROM image")
        for base in bases:
            problem = _image_reference_problem(base)
            if problem is not None:
                problems.append(f"{path}: base {problem}")
    return problems


def version_problems(compose: Compose, dockerfiles: dict[str, str]) -> list[str]:
    """Spark, Scala, Iceberg, the jars and Python match what ``airflow_iceberg_dml.runtime`` pins."""
    services = _services(compose)
    problems: list[str] = []

    spark_services = {n: s for n, s in services.items() if _dockerfile_of(s) == SPARK_DOCKERFILE}
    if not spark_services:
        problems.append(f"no service builds {SPARK_DOCKERFILE}")
    for name, service in sorted(spark_services.items()):
        tag = _tag(interpolate(str(service.get("image", ""))))
        if tag != SPARK_IMAGE_TAG:
            problems.append(f"{name}: Spark image tag {tag!r}, expected {SPARK_IMAGE_TAG!r}")

    spark_dockerfile = dockerfiles.get(SPARK_DOCKERFILE, "")
    spark_bases = [b for b in _base_images(spark_dockerfile) if _repository(b) == SPARK_BASE_IMAGE]
    if not spark_bases:
        problems.append(f"{SPARK_DOCKERFILE} is not built FROM {SPARK_BASE_IMAGE}")
    problems.extend(
        f"{SPARK_DOCKERFILE}: FROM {base}, expected a tag starting with {SPARK_BASE_TAG_PREFIX!r}"
        for base in spark_bases
        if not _tag(base).startswith(SPARK_BASE_TAG_PREFIX)
    )
    coordinates = set(re.findall(r"org\.apache\.iceberg:[\w.-]+:[\w.-]+", spark_dockerfile))
    expected_coordinates = {ICEBERG_SPARK_RUNTIME.coordinates, ICEBERG_AWS_BUNDLE.coordinates}
    if coordinates != expected_coordinates:
        problems.append(
            f"{SPARK_DOCKERFILE} fetches {sorted(coordinates)}, expected {sorted(expected_coordinates)} "
            f"(Spark {SPARK_MINOR_VERSION}, Scala {SCALA_BINARY_VERSION}, Iceberg {ICEBERG_VERSION})"
        )

    rest_images = [
        interpolate(str(s["image"]))
        for s in services.values()
        if s.get("image") and _repository(interpolate(str(s["image"]))) == ICEBERG_REST_IMAGE
    ]
    if not rest_images:
        problems.append(f"no service runs {ICEBERG_REST_IMAGE}")
    problems.extend(
        f"{image}: expected the tag {ICEBERG_VERSION!r}, the Iceberg version of the jars"
        for image in rest_images
        if _tag(image) != ICEBERG_VERSION
    )

    problems.extend(_airflow_image_problems(services, dockerfiles.get(AIRFLOW_DOCKERFILE, "")))
    problems.extend(_python_problems(services, dockerfiles))
    return problems


def _airflow_image_problems(services: dict[str, Service], dockerfile: str) -> list[str]:
    """The Airflow image carries its base tag and presets the jar list the runtime would fetch."""
    problems: list[str] = []
    bases = [b for b in _base_images(dockerfile) if _repository(b) == AIRFLOW_BASE_IMAGE]
    if not bases:
        return [f"{AIRFLOW_DOCKERFILE} is not built FROM {AIRFLOW_BASE_IMAGE}"]
    base_tag = _tag(bases[-1])
    for name, service in sorted(services.items()):
        if _dockerfile_of(service) == AIRFLOW_DOCKERFILE:
            tag = _tag(interpolate(str(service.get("image", ""))))
            if tag != base_tag:
                problems.append(f"{name}: Airflow image tag {tag!r}, expected the base tag {base_tag!r}")

    caches = _env_values(dockerfile, JAR_CACHE_ENV)
    jar_lists = _env_values(dockerfile, JARS_ENV)
    if not caches or not jar_lists:
        return [*problems, f"{AIRFLOW_DOCKERFILE} sets no {JAR_CACHE_ENV} and {JARS_ENV}"]
    cache = caches[-1][1].rstrip("/")
    expected = [f"{cache}/{artifact.file_name}" for artifact in (*DEFAULT_ARTIFACTS, *S3_ARTIFACTS)]
    value = jar_lists[-1][1]
    if sorted(value.split(",")) != sorted(expected):
        problems.append(f"{AIRFLOW_DOCKERFILE}: {JARS_ENV}={value}, expected the jars {expected}")
    fetches = [
        i
        for i, (keyword, arguments) in enumerate(_dockerfile_instructions(dockerfile))
        if keyword == "RUN" and "airflow_iceberg_dml.runtime fetch" in arguments
    ]
    # The runtime takes a set jar list as is: set before the fetch, it would make the fetch a no-op.
    first_jar_list = min(index for index, _ in jar_lists)
    if not fetches or min(fetches) < caches[-1][0] or max(fetches) > first_jar_list:
        problems.append(
            f"{AIRFLOW_DOCKERFILE} must run the jar fetch after {JAR_CACHE_ENV}, before {JARS_ENV}"
        )
    return problems


def _python_problems(services: dict[str, Service], dockerfiles: dict[str, str]) -> list[str]:
    """PySpark workers run the driver's Python minor: the Airflow image's, installed in the Spark image."""
    bases = [b for b in _base_images(dockerfiles.get(AIRFLOW_DOCKERFILE, "")) if "python" in _tag(b)]
    if not bases:
        return [f"{AIRFLOW_DOCKERFILE}: no pythonX.Y in the base image tag"]
    driver_python = "python" + _tag(bases[-1]).rsplit("python", 1)[1]
    problems: list[str] = []
    spark_pythons = set(re.findall(r"\bpython3\.\d+\b", dockerfiles.get(SPARK_DOCKERFILE, "")))
    if spark_pythons != {driver_python}:
        problems.append(f"{SPARK_DOCKERFILE} installs {sorted(spark_pythons)}, expected {driver_python}")
    for name, service in sorted(services.items()):
        environment = _environment(service)
        if _connections(service) and environment.get("PYSPARK_PYTHON") != driver_python:
            problems.append(
                f"{name}: PYSPARK_PYTHON={environment.get('PYSPARK_PYTHON')!r}, expected {driver_python!r} "
                "(the Spark image's python3 is another minor)"
            )
    return problems


def healthcheck_problems(compose: Compose) -> list[str]:
    """Every long-running service (all but the one-shots others wait to finish) has a healthcheck."""
    one_shots = _one_shot_services(compose)
    problems: list[str] = []
    for name, service in _services(compose).items():
        if name in one_shots:
            continue
        healthcheck = service.get("healthcheck") or {}
        test = _healthcheck_test(service)
        if healthcheck.get("disable") or not test or test[0] == "NONE":
            problems.append(f"{name} runs until stopped but has no healthcheck")
    return problems


def mount_problems(compose: Compose, root: Path = REPO_ROOT) -> list[str]:
    """Bind mounts point at folders of the repository, and the Airflow services see ./dags."""
    problems: list[str] = []
    for name, service in _services(compose).items():
        mounts = {}
        for volume in service.get("volumes") or []:
            if isinstance(volume, str) and volume.startswith((".", "/")):
                source, target = volume.split(":")[:2]
                mounts[target] = source
                if not (root / source).exists():
                    problems.append(f"{name} mounts {source}, which does not exist in the repository")
        if _dockerfile_of(service) == AIRFLOW_DOCKERFILE and mounts.get(AIRFLOW_DAGS_TARGET) != "./dags":
            problems.append(f"{name} does not mount ./dags at {AIRFLOW_DAGS_TARGET}")
    return problems


# ---------------------------------------------------------------------------------------------------
# The real file


def test_compose_schema_is_test_data_of_the_repository() -> None:
    # A fresh clone has nothing beside it: the schema must travel with the tests.
    assert COMPOSE_SCHEMA_FILE.resolve().is_relative_to(REPO_ROOT)
    assert COMPOSE_SCHEMA_FILE.is_file()


@pytest.fixture(scope="module")
def compose_schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(COMPOSE_SCHEMA_FILE.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def real_stack() -> Stack:
    compose = load_compose()
    return Stack(compose, load_dockerfiles(compose))


@pytest.fixture
def stack(real_stack: Stack) -> Stack:
    """A private deep copy, for tests that break it."""
    return copy.deepcopy(real_stack)


def test_compose_file_matches_the_compose_schema(real_stack: Stack, compose_schema: dict[str, Any]) -> None:
    assert schema_problems(real_stack.compose, compose_schema) == []


def test_connections_name_services_and_their_ports(real_stack: Stack) -> None:
    assert connection_problems(real_stack.compose) == []


def test_urls_name_services_and_their_ports(real_stack: Stack) -> None:
    assert endpoint_problems(real_stack.compose) == []


def test_depends_on_is_consistent(real_stack: Stack) -> None:
    assert dependency_problems(real_stack.compose) == []


def test_services_wait_for_what_they_talk_to(real_stack: Stack) -> None:
    assert startup_order_problems(real_stack.compose) == []


def test_images_are_pinned(real_stack: Stack) -> None:
    assert image_problems(real_stack.compose, real_stack.dockerfiles) == []


def test_versions_match_the_runtime_pins(real_stack: Stack) -> None:
    assert version_problems(real_stack.compose, real_stack.dockerfiles) == []


def test_long_running_services_have_healthchecks(real_stack: Stack) -> None:
    assert healthcheck_problems(real_stack.compose) == []


def test_mounts_exist_and_airflow_sees_the_dags(real_stack: Stack) -> None:
    assert mount_problems(real_stack.compose) == []


# ---------------------------------------------------------------------------------------------------
# Broken copies: each check must report the problem it exists for


def _airflow_env(stack: Stack) -> dict[str, Any]:
    # The Airflow services share one environment mapping (a YAML anchor), so this breaks all of them.
    environment: dict[str, Any] = stack.compose["services"]["airflow-scheduler"]["environment"]
    return environment


def _edit_connection(variable: str, edit: Callable[[dict[str, Any]], None]) -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        environment = _airflow_env(stack)
        connection = json.loads(interpolate(environment[variable]))
        edit(connection)
        environment[variable] = json.dumps(connection)

    return mutate


def _set(path: str, value: Any) -> Callable[[Stack], None]:
    """Set ``services/<name>/.../<key>`` in the compose dict."""

    def mutate(stack: Stack) -> None:
        *parents, key = path.split("/")
        node = stack.compose
        for part in parents:
            node = node[part]
        node[key] = value

    return mutate


def _delete(path: str) -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        *parents, key = path.split("/")
        node = stack.compose
        for part in parents:
            node = node[part]
        del node[key]

    return mutate


def _delete_all(*paths: str) -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        for path in paths:
            _delete(path)(stack)

    return mutate


def _replace_in_dockerfile(dockerfile: str, pattern: str, new: str) -> Callable[[Stack], None]:
    def mutate(stack: Stack) -> None:
        text, count = re.subn(pattern, new, stack.dockerfiles[dockerfile])
        assert count, f"{pattern!r} not in {dockerfile}: the breakage is stale"
        stack.dockerfiles[dockerfile] = text

    return mutate


def _schema_check(stack: Stack) -> list[str]:
    return schema_problems(stack.compose, json.loads(COMPOSE_SCHEMA_FILE.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Breakage:
    id: str
    mutate: Callable[[Stack], None]
    check: Callable[[Stack], list[str]]
    expected: str


def _connections_check(stack: Stack) -> list[str]:
    return connection_problems(stack.compose)


def _endpoints_check(stack: Stack) -> list[str]:
    return endpoint_problems(stack.compose)


def _dependencies_check(stack: Stack) -> list[str]:
    return dependency_problems(stack.compose)


def _startup_check(stack: Stack) -> list[str]:
    return startup_order_problems(stack.compose)


def _images_check(stack: Stack) -> list[str]:
    return image_problems(stack.compose, stack.dockerfiles)


def _versions_check(stack: Stack) -> list[str]:
    return version_problems(stack.compose, stack.dockerfiles)


def _health_check(stack: Stack) -> list[str]:
    return healthcheck_problems(stack.compose)


def _mounts_check(stack: Stack) -> list[str]:
    return mount_problems(stack.compose)


def _set_host(host: str) -> Callable[[dict[str, Any]], None]:
    def edit(connection: dict[str, Any]) -> None:
        connection["host"] = host

    return edit


def _set_extra(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def edit(connection: dict[str, Any]) -> None:
        connection["extra"][key] = value

    return edit


def _set_port(port: int) -> Callable[[dict[str, Any]], None]:
    def edit(connection: dict[str, Any]) -> None:
        connection["port"] = port

    return edit


BREAKAGES = [
    Breakage(
        "connection-to-missing-service",
        _edit_connection("AIRFLOW_CONN_SPARK_DEFAULT", _set_host("spark://spark-leader")),
        _connections_check,
        "'spark-leader', which is not a service",
    ),
    Breakage(
        "connection-to-wrong-port",
        _edit_connection("AIRFLOW_CONN_SPARK_DEFAULT", _set_port(7078)),
        _connections_check,
        "spark-master:7078",
    ),
    Breakage(
        "catalog-uri-to-wrong-port",
        _edit_connection("AIRFLOW_CONN_ICEBERG_DEFAULT", _set_host("http://iceberg-rest:8182")),
        _connections_check,
        "iceberg-rest:8182",
    ),
    Breakage(
        "s3-endpoint-to-missing-service",
        _edit_connection("AIRFLOW_CONN_ICEBERG_DEFAULT", _set_extra("s3.endpoint", "http://s3:9000")),
        _connections_check,
        "'s3', which is not a service",
    ),
    Breakage(
        "connection-not-json",
        _set(
            "services/airflow-scheduler/environment/AIRFLOW_CONN_SPARK_DEFAULT", "spark://spark-master:7077"
        ),
        _connections_check,
        "is not a JSON connection",
    ),
    Breakage(
        "default-connection-missing",
        _delete("services/airflow-scheduler/environment/AIRFLOW_CONN_ICEBERG_DEFAULT"),
        _connections_check,
        "AIRFLOW_CONN_ICEBERG_DEFAULT",
    ),
    Breakage(
        "database-url-to-missing-service",
        _set(
            "services/airflow-scheduler/environment/AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            "postgresql+psycopg2://airflow:airflow@metadata-db:5432/airflow",
        ),
        _endpoints_check,
        "'metadata-db', which is not a service",
    ),
    Breakage(
        "catalog-s3-endpoint-to-wrong-port",
        _set("services/iceberg-rest/environment/CATALOG_S3_ENDPOINT", "http://minio:9002"),
        _endpoints_check,
        "minio:9002",
    ),
    Breakage(
        "depends-on-missing-service",
        _set("services/spark-worker/depends_on/spark-driver", {"condition": "service_started"}),
        _dependencies_check,
        "'spark-driver', which is not a service",
    ),
    Breakage(
        "depends-on-cycle",
        _set("services/spark-master/depends_on", {"spark-worker": {"condition": "service_healthy"}}),
        _dependencies_check,
        "cycle",
    ),
    Breakage(
        "healthy-condition-without-healthcheck",
        _delete("services/spark-master/healthcheck"),
        _dependencies_check,
        "waits for spark-master to be healthy, but it has no healthcheck",
    ),
    Breakage(
        "scheduler-does-not-wait-for-the-catalog",
        # Directly, and through spark-connect (which waits for the catalog itself).
        _delete_all(
            "services/airflow-scheduler/depends_on/iceberg-rest",
            "services/airflow-scheduler/depends_on/spark-connect",
        ),
        _startup_check,
        "airflow-scheduler talks to iceberg-rest",
    ),
    Breakage(
        "worker-waits-only-for-start",
        _set("services/spark-worker/depends_on/spark-master/condition", "service_started"),
        _startup_check,
        "spark-worker talks to spark-master",
    ),
    Breakage(
        "schema-rejects-unknown-key",
        _set("services/postgres/healthcheck/intervall", "10s"),
        _schema_check,
        "intervall",
    ),
    Breakage(
        "schema-rejects-wrong-type",
        _set("services/minio/ports", "9000:9000"),
        _schema_check,
        "services/minio/ports",
    ),
    Breakage(
        "image-latest",
        _set("services/minio/image", "minio/minio:latest"),
        _images_check,
        "'minio/minio:latest' is not pinned",
    ),
    Breakage(
        "image-untagged",
        _set("services/postgres/image", "postgres"),
        _images_check,
        "'postgres' has no tag",
    ),
    Breakage(
        "dockerfile-base-latest",
        _replace_in_dockerfile(AIRFLOW_DOCKERFILE, r"FROM apache/airflow:\S+", "FROM apache/airflow:latest"),
        _images_check,
        "base image 'apache/airflow:latest'",
    ),
    Breakage(
        "spark-image-tag",
        _set("services/spark-master/image", "airflow-iceberg-dml/spark:3.5.6-scala2.12-iceberg1.11.0"),
        _versions_check,
        "spark-master: Spark image tag '3.5.6-scala2.12-iceberg1.11.0'",
    ),
    Breakage(
        "spark-base-image-version",
        _replace_in_dockerfile(
            SPARK_DOCKERFILE, re.escape(f"apache/spark:{SPARK_VERSION}-"), "apache/spark:4.0.1-"
        ),
        _versions_check,
        "FROM apache/spark:4.0.1-",
    ),
    Breakage(
        "iceberg-runtime-for-another-spark",
        _replace_in_dockerfile(
            SPARK_DOCKERFILE, re.escape(ICEBERG_SPARK_RUNTIME.artifact), "iceberg-spark-runtime-4.0_2.13"
        ),
        _versions_check,
        "iceberg-spark-runtime-4.0_2.13",
    ),
    Breakage(
        "iceberg-rest-tag",
        _set("services/iceberg-rest/image", "apache/iceberg-rest-fixture:1.10.0"),
        _versions_check,
        "apache/iceberg-rest-fixture:1.10.0",
    ),
    Breakage(
        "jar-list-without-aws-bundle",
        _replace_in_dockerfile(
            AIRFLOW_DOCKERFILE, re.escape(f"/{ICEBERG_AWS_BUNDLE.file_name}"), "/another.jar"
        ),
        _versions_check,
        f"{JARS_ENV}=",
    ),
    Breakage(
        "jar-list-set-before-fetch",
        _replace_in_dockerfile(
            AIRFLOW_DOCKERFILE,
            r"RUN python -m airflow_iceberg_dml\.runtime fetch",
            f"ENV {JARS_ENV}=/tmp/none.jar\nRUN python -m airflow_iceberg_dml.runtime fetch",
        ),
        _versions_check,
        "must run the jar fetch",
    ),
    Breakage(
        "executors-on-another-python",
        _set("services/airflow-scheduler/environment/PYSPARK_PYTHON", "python3"),
        _versions_check,
        "PYSPARK_PYTHON='python3'",
    ),
    Breakage(
        "long-running-service-without-healthcheck",
        _delete("services/airflow-api-server/healthcheck"),
        _health_check,
        "airflow-api-server runs until stopped but has no healthcheck",
    ),
    Breakage(
        "dags-not-mounted",
        _set("services/airflow-triggerer/volumes", ["airflow-logs:/opt/airflow/logs"]),
        _mounts_check,
        "airflow-triggerer does not mount ./dags",
    ),
]


@pytest.mark.parametrize("breakage", BREAKAGES, ids=[breakage.id for breakage in BREAKAGES])
def test_checks_report_a_broken_copy(stack: Stack, breakage: Breakage) -> None:
    assert breakage.check(stack) == [], "the real file must pass before it is broken"
    breakage.mutate(stack)
    problems = breakage.check(stack)
    assert any(breakage.expected in problem for problem in problems), problems
