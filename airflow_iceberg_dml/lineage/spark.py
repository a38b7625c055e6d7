"""The Spark application, nested under its Airflow task: the ``spark.openlineage.*`` properties."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow.sdk import Context

log = logging.getLogger(__name__)

# -- the Spark application, nested under its Airflow task -------------------------------------------------

#: Transport settings that may carry a credential: never passed to Spark.
_SECRET_TRANSPORT_KEYS = (".auth.", ".headers.")


def openlineage_enabled() -> bool:
    """Whether the OpenLineage provider is installed and enabled (``[openlineage]`` has a transport)."""
    try:
        from airflow.providers.openlineage import conf as openlineage_conf
    except ImportError:
        return False
    return not openlineage_conf.is_disabled()


def openlineage_config_default(option: str) -> bool:
    """``[openlineage] <option>`` (``spark_inject_parent_job_info`` ...), False when unset."""
    from airflow.sdk import conf

    return conf.getboolean("openlineage", option, fallback=False)


def spark_lineage_properties(
    context: Context,
    *,
    inject_parent_job: bool,
    inject_transport: bool,
    existing: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """``spark.openlineage.*`` properties that nest a Spark application under the task in ``context``.

    The parent job (namespace, job name and run id of this task and of its DAG run) when
    ``inject_parent_job``; the HTTP transport (URL, endpoint, timeout, compression) when
    ``inject_transport``. Empty when the OpenLineage provider is not installed or is disabled. A group
    already present in ``existing`` (the user's ``spark_conf``) is left to the user, as the Spark
    provider does. Credentials of the transport (API key, headers) are never included: give them to
    the Spark listener in ``spark_conf`` yourself, where they stay off the command line.
    """
    if not (inject_parent_job or inject_transport):
        return {}
    if not openlineage_enabled():
        return {}
    from airflow.providers.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
        inject_transport_information_into_spark_properties,
    )

    given = dict(existing or {})
    found: dict[str, Any] = {}
    if inject_parent_job:
        found.update(inject_parent_job_information_into_spark_properties(dict(given), context))
    if inject_transport:
        found.update(inject_transport_information_into_spark_properties(dict(given), context))
    properties = {str(key): str(value) for key, value in found.items() if key not in given}
    secret = sorted(key for key in properties if any(part in key for part in _SECRET_TRANSPORT_KEYS))
    if secret:
        log.warning(
            "Not passing the OpenLineage transport's %s to Spark (credentials); set them in spark_conf "
            "if the Spark listener needs them.",
            ", ".join(secret),
        )
    return {key: value for key, value in properties.items() if key not in secret}
