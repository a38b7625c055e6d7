"""One mechanism writes and reads every job spec and the record (airflow_iceberg_dml/wire.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import get_args

import pytest

from airflow_iceberg_dml.spec import (
    SPEC_VERSION,
    Audits,
    CommitPolicy,
    CompactionStrategy,
    DmlSpec,
    ErasureMode,
    ErasureSpec,
    ErasureTarget,
    ExpireSnapshotsCall,
    GroupMember,
    Guards,
    IsolationLevel,
    JobKind,
    JobRecord,
    MaintenanceSpec,
    Outcome,
    Plan,
    ProcedureCall,
    RemoveOrphanFilesCall,
    RewriteDataFilesCall,
    RewriteManifestsCall,
    RewritePositionDeleteFilesCall,
    RunKey,
    WriteMode,
)
from airflow_iceberg_dml.wire import WireError

KEY = RunKey("dag", "task", "run", 3)

#: Every optional field set to something other than its default (checked below), every call type.
FULL = [
    DmlSpec(
        kind=JobKind.UPDATE,
        catalog="c",
        table="db.t",
        where="id IN :ids",
        assignments={"status": "'x'"},
        parameters={"ids": [1, 2], "name": "a", "rate": 1.5, "flag": True, "nothing": None},
        write_mode=WriteMode.COPY_ON_WRITE,
        branch="dev",
        snapshot_properties={"k": "v"},
        result_path="/tmp/r.json",
        expected_snapshot_id=2**62 + 1,
        run_key=KEY,
        dry_run=True,
        guards=Guards(max_rows_affected=10, max_fraction_affected=0.5),
        commit_policy=CommitPolicy(
            exactly_once=False, conflict_retries=5, isolation_level=IsolationLevel.SNAPSHOT
        ),
        audits=Audits({"a": "SELECT count(*) >= 0 FROM {table}"}, keep_failed_branch=True),
        group=(
            GroupMember(RunKey("dag", "task", "run-2", -1), "id = 2", JobKind.UPDATE, {"v": "1"}, "5a0c"),
        ),
        version=SPEC_VERSION,
    ),
    MaintenanceSpec(
        catalog="c",
        table="db.t",
        calls=(
            RewriteDataFilesCall(CompactionStrategy.SORT, "zorder(a, b)", "p = 1", {"min-input-files": "2"}),
            RewritePositionDeleteFilesCall(
                where="p = 2", options={"rewrite-all": "true"}, only_if_delete_files_remain=False
            ),
            RewriteManifestsCall(use_caching=False),
            ExpireSnapshotsCall(
                older_than_ms=5,
                retain_last=2,
                min_age_ms=9,
                max_concurrent_deletes=4,
                clean_expired_metadata=True,
                snapshot_ids=(11, 12),
            ),
            RemoveOrphanFilesCall(
                older_than_ms=6, dry_run=True, min_age_ms=10, location="s3://b/t", max_concurrent_deletes=3
            ),
        ),
        snapshot_properties={"k": "v"},
        conflict_retries=1,
        result_path="/tmp/r.json",
    ),
    ErasureSpec(
        mode=ErasureMode.PURGE,
        catalog="c",
        erasure_id="req-1",
        targets=(ErasureTarget("db.l", "k", "db.o", "ok", "cust"), ErasureTarget("db.o", "cust")),
        subjects=(1, "two", 2.5, None),
        subjects_query="SELECT 1",
        run_key=KEY,
        snapshot_properties={"k": "v"},
        write_mode=WriteMode.COPY_ON_WRITE,
        conflict_retries=0,
        protected_refs=("audit",),
        purge_ahead_ms=7,
        min_retention_ms=8,
        orphan_grace_ms=9,
        digest_salt="5a17",
        result_path="/tmp/r.json",
    ),
    JobRecord(
        Outcome.FAILED,
        spark_app_id="app-1",
        snapshot_id=2**63 - 1,
        write_mode="merge-on-read",
        plan=Plan.ROW_LEVEL,
        statement="DELETE ...",
        error_type="GuardExceededError",
        error_message="m",
        retryable=False,
        details={"rows_matched": 3, "partitions": [{"partition": {"p": 1}}], "none": None},
    ),
]
#: Only the required fields: every optional one at its default.
BARE = [
    DmlSpec(kind=JobKind.DELETE, catalog="c", table="db.t", where="TRUE"),
    MaintenanceSpec(catalog="c", table="db.t", calls=(ExpireSnapshotsCall(older_than_ms=1),)),
    MaintenanceSpec(catalog="c", table="db.t", calls=()),
    ErasureSpec(mode=ErasureMode.ERASE, catalog="c", erasure_id="r", targets=(ErasureTarget("db.o", "c"),)),
    JobRecord(Outcome.NOOP),
]
SPECS = FULL + BARE


def _defaulted_fields(value: object) -> list[tuple[object, dataclasses.Field[object]]]:
    """Every field with a default of ``value`` and of the dataclasses it holds."""
    found = []
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
            found.append((value, field))
        for nested in item if isinstance(item, tuple) else (item,):
            if dataclasses.is_dataclass(nested):
                found.extend(_defaulted_fields(nested))
    return found


def _is_default(owner: object, field: dataclasses.Field[object]) -> bool:
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
    return getattr(owner, field.name) == default


def test_the_full_cases_set_every_optional_field_and_the_bare_ones_none():
    """So that the round trips below cover each field both ways, including fields added later."""
    seen: dict[str, bool] = {}  # each class's optional field: set somewhere in FULL
    for owner, field in (found for spec in FULL for found in _defaulted_fields(spec)):
        name = f"{type(owner).__name__}.{field.name}"
        seen[name] = seen.get(name, False) or not _is_default(owner, field)
    assert [name for name, is_set in seen.items() if not is_set] == [
        f"{kind.__name__}.version" for kind in (DmlSpec, MaintenanceSpec, ErasureSpec)
    ]
    kinds = {type(spec) for spec in FULL} | {type(call) for call in FULL[1].calls}
    assert kinds >= {DmlSpec, MaintenanceSpec, ErasureSpec, JobRecord, *get_args(ProcedureCall)}
    for spec in BARE:
        assert all(_is_default(owner, field) for owner, field in _defaulted_fields(spec))


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: type(spec).__name__)
def test_every_spec_and_the_record_round_trip_with_their_types(spec):
    text = spec.to_json()
    again = type(spec).from_json(text)
    assert again == spec
    assert again.to_json() == text
    for call, given in zip(getattr(again, "calls", ()), getattr(spec, "calls", ()), strict=True):
        assert type(call) is type(given)  # the union member is kept
    assert [type(value) for value in _values(again)] == [type(value) for value in _values(spec)]


def _values(value: object) -> list[object]:
    """Every field value, nested dataclasses and tuples included (enums stay enums, tuples tuples)."""
    found: list[object] = []
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        found.append(item)
        for nested in item if isinstance(item, tuple) else (item,):
            if dataclasses.is_dataclass(nested):
                found.extend(_values(nested))
    return found


def test_enums_travel_as_their_values_and_calls_carry_their_procedure():
    payload = json.loads(FULL[1].to_json())
    assert [call["procedure"] for call in payload["calls"]] == [
        "rewrite_data_files",
        "rewrite_position_delete_files",
        "rewrite_manifests",
        "expire_snapshots",
        "remove_orphan_files",
    ]
    assert payload["calls"][0]["strategy"] == "sort"
    assert json.loads(FULL[0].to_json())["commit_policy"]["isolation_level"] == "snapshot"
    assert json.loads(FULL[3].to_json())["outcome"] == "failed"


def test_the_wire_format_is_the_dataclass_fields_with_sorted_keys():
    """What the Airflow side writes and the Spark side reads: field names as keys, nothing else."""
    text = BARE[0].to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True)
    assert json.loads(text) == {
        "assignments": {},
        "audits": {"keep_failed_branch": False, "queries": {}},
        "branch": None,
        "catalog": "c",
        "commit_policy": {"conflict_retries": 2, "exactly_once": True, "isolation_level": None},
        "dry_run": False,
        "expected_snapshot_id": None,
        "group": [],
        "guards": {"max_fraction_affected": None, "max_rows_affected": None},
        "kind": "delete",
        "parameters": {},
        "result_path": None,
        "run_key": None,
        "snapshot_properties": {},
        "table": "db.t",
        "version": SPEC_VERSION,
        "where": "TRUE",
        "write_mode": "merge-on-read",
    }


@pytest.mark.parametrize("spec_type", [DmlSpec, MaintenanceSpec, ErasureSpec])
def test_a_spec_of_another_layout_version_is_refused(spec_type):
    payload = json.loads(next(spec for spec in SPECS if type(spec) is spec_type).to_json())
    payload["version"] = SPEC_VERSION - 1
    expected = rf"Job spec version {SPEC_VERSION - 1} is not supported by this job \(expects {SPEC_VERSION}\)"
    with pytest.raises(ValueError, match=expected):
        spec_type.from_json(json.dumps(payload))
    del payload["version"]
    with pytest.raises(ValueError, match="Job spec version None is not supported"):
        spec_type.from_json(json.dumps(payload))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.update(surprise=1), r"^DmlSpec: unknown field\(s\) \['surprise'\]"),
        (lambda p: p.pop("where"), r"^DmlSpec: .*missing 1 required .*'where'"),
        (lambda p: p.update(guards=[1]), r"^DmlSpec\.guards: expected an object \(Guards\), not \[1\]"),
        (
            lambda p: p.update(kind="merge"),
            r"^DmlSpec\.kind: 'merge' is not a valid JobKind \(one of 'delete', ",
        ),
        (lambda p: p.update(run_key={"dag_id": "d"}), r"^DmlSpec\.run_key: .*missing 2 required"),
        (lambda p: p.update(parameters=[]), r"^DmlSpec\.parameters: expected an object, not \[\]"),
        (
            lambda p: p["guards"].update(max_fraction_affected=2),
            r"^DmlSpec\.guards: max_fraction_affected=2 must be between 0 and 1",
        ),
        (
            lambda p: p["commit_policy"].update(isolation_level="strict"),
            r"^DmlSpec\.commit_policy\.isolation_level: 'strict' is not a valid IsolationLevel",
        ),
    ],
)
def test_a_malformed_payload_says_what_is_wrong_and_where(change, message):
    payload = json.loads(BARE[0].to_json())
    change(payload)
    with pytest.raises(WireError, match=message):
        DmlSpec.from_json(json.dumps(payload))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"^DmlSpec: not JSON \(Expecting value"),
        ('{"kind": "delete"', r"^DmlSpec: not JSON"),
        ("[1, 2]", r"^DmlSpec: expected a JSON object, not \[1, 2\]"),
        ("null", r"^DmlSpec: expected a JSON object, not None"),
    ],
)
def test_text_that_is_not_a_json_object_is_refused(text, message):
    with pytest.raises(WireError, match=message):
        DmlSpec.from_json(text)


def test_a_record_that_is_not_json_is_refused_too():
    with pytest.raises(WireError, match=r"^JobRecord: not JSON"):
        JobRecord.from_json("Traceback (most recent call last):")
    with pytest.raises(WireError, match=r"^JobRecord\.outcome: 'exploded' is not a valid Outcome"):
        JobRecord.from_json('{"outcome": "exploded"}')


def test_an_unknown_or_missing_procedure_is_refused():
    payload = json.loads(FULL[1].to_json())
    payload["calls"][0]["procedure"] = "drop_everything"
    unknown = r"^MaintenanceSpec\.calls\[0\]: no member of the union has procedure='drop_everything'"
    with pytest.raises(WireError, match=unknown + r" \(one of \['expire_snapshots', "):
        MaintenanceSpec.from_json(json.dumps(payload))
    del payload["calls"][0]["procedure"]
    with pytest.raises(WireError, match=r"procedure=None"):
        MaintenanceSpec.from_json(json.dumps(payload))
    payload["calls"] = [["rewrite_manifests"]]
    with pytest.raises(WireError, match=r"procedure=None"):
        MaintenanceSpec.from_json(json.dumps(payload))
    payload["calls"] = {"rewrite_manifests": {}}
    with pytest.raises(WireError, match=r"^MaintenanceSpec\.calls: expected a list"):
        MaintenanceSpec.from_json(json.dumps(payload))


def test_a_call_field_of_another_call_is_refused():
    payload = json.loads(FULL[1].to_json())
    payload["calls"][2]["dry_run"] = True  # remove_orphan_files' field on rewrite_manifests
    with pytest.raises(WireError, match=r"^MaintenanceSpec\.calls\[2\]: unknown field\(s\) \['dry_run'\]"):
        MaintenanceSpec.from_json(json.dumps(payload))


def test_the_spec_side_needs_no_airflow():
    """The Spark driver has this package and pyspark only: reading a spec must not import Airflow."""
    code = (
        "import sys; sys.modules['airflow'] = None; sys.modules['pydantic'] = None\n"
        "from airflow_iceberg_dml.spec import DmlSpec\n"
        "import airflow_iceberg_dml.wire, airflow_iceberg_dml.specs.record\n"
        f"print(DmlSpec.from_json({BARE[0].to_json()!r}).table)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "db.t"), done.stderr
