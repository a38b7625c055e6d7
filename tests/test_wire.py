"""One mechanism writes and reads every job spec and the record (airflow_iceberg_dml/wire.py)."""

from __future__ import annotations

import json

import pytest

from airflow_iceberg_dml.spec import (
    Audits,
    CommitPolicy,
    CompactionStrategy,
    DmlSpec,
    ErasureMode,
    ErasureSpec,
    ErasureTarget,
    ExpireSnapshotsCall,
    Guards,
    IsolationLevel,
    JobKind,
    JobRecord,
    MaintenanceSpec,
    Outcome,
    Plan,
    RemoveOrphanFilesCall,
    RewriteDataFilesCall,
    RewriteManifestsCall,
    RewritePositionDeleteFilesCall,
    RunKey,
    WriteMode,
)
from airflow_iceberg_dml.wire import WireError

KEY = RunKey("dag", "task", "run", 3)

SPECS = [
    DmlSpec(kind=JobKind.DELETE, catalog="c", table="db.t", where="TRUE"),
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
        audits=Audits({"a": "SELECT true"}, keep_failed_branch=True),
    ),
    MaintenanceSpec(
        catalog="c",
        table="db.t",
        calls=(
            RewriteDataFilesCall(CompactionStrategy.SORT, "zorder(a, b)", "p = 1", {"min-input-files": "2"}),
            RewritePositionDeleteFilesCall(
                options={"rewrite-all": "true"}, only_if_delete_files_remain=False
            ),
            RewriteManifestsCall(use_caching=False),
            ExpireSnapshotsCall(
                older_than_ms=5, retain_last=2, max_concurrent_deletes=4, clean_expired_metadata=True
            ),
            RemoveOrphanFilesCall(older_than_ms=6, dry_run=True, location="s3://b/t"),
        ),
        snapshot_properties={"k": "v"},
        conflict_retries=1,
    ),
    MaintenanceSpec(catalog="c", table="db.t", calls=()),
    ErasureSpec(
        mode=ErasureMode.PURGE,
        catalog="c",
        erasure_id="req-1",
        targets=(ErasureTarget("db.l", "k", "db.o", "ok", "cust"), ErasureTarget("db.o", "cust")),
        subjects=(1, "two"),
        run_key=KEY,
        protected_refs=("audit",),
        purge_ahead_ms=7,
        min_retention_ms=8,
    ),
    ErasureSpec(
        mode=ErasureMode.ERASE,
        catalog="c",
        erasure_id="r",
        targets=(ErasureTarget("db.o", "c"),),
        subjects_query="SELECT 1",
    ),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: type(spec).__name__)
def test_every_spec_round_trips_with_its_types(spec):
    text = spec.to_json()
    again = type(spec).from_json(text)
    assert again == spec
    assert again.to_json() == text
    for call in getattr(again, "calls", ()):
        assert type(call) in {type(given) for given in spec.calls}  # the union member is kept


def test_enums_travel_as_their_values_and_calls_carry_their_procedure():
    payload = json.loads(SPECS[2].to_json())
    assert [call["procedure"] for call in payload["calls"]] == [
        "rewrite_data_files",
        "rewrite_position_delete_files",
        "rewrite_manifests",
        "expire_snapshots",
        "remove_orphan_files",
    ]
    assert payload["calls"][0]["strategy"] == "sort"
    assert json.loads(SPECS[1].to_json())["commit_policy"]["isolation_level"] == "snapshot"


@pytest.mark.parametrize(
    "record",
    [
        JobRecord(Outcome.COMMITTED, "app-1", 2**63 - 1, "merge-on-read", Plan.ROW_LEVEL, "DELETE ..."),
        JobRecord(Outcome.FAILED, error_type="GuardExceededError", error_message="m", retryable=False),
        JobRecord(Outcome.DRY_RUN, details={"rows_matched": 3, "partitions": [{"partition": {"p": 1}}]}),
    ],
)
def test_the_record_round_trips(record):
    assert JobRecord.from_json(record.to_json()) == record


def test_a_spec_of_another_layout_version_is_refused():
    payload = json.loads(SPECS[0].to_json())
    payload["version"] = 1
    with pytest.raises(ValueError, match=r"Job spec version 1 is not supported by this job \(expects 2\)"):
        DmlSpec.from_json(json.dumps(payload))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.update(surprise=1), r"DmlSpec: unknown field\(s\) \['surprise'\]"),
        (lambda p: p.pop("where"), r"DmlSpec: .*missing 1 required .*'where'"),
        (lambda p: p.update(guards=[1]), r"Guards: expected an object"),
        (lambda p: p.update(kind="merge"), r"'merge' is not a valid JobKind"),
    ],
)
def test_a_malformed_payload_says_what_is_wrong(change, message):
    payload = json.loads(SPECS[0].to_json())
    change(payload)
    with pytest.raises(ValueError, match=message):
        DmlSpec.from_json(json.dumps(payload))


def test_an_unknown_procedure_is_refused():
    payload = json.loads(SPECS[2].to_json())
    payload["calls"][0]["procedure"] = "drop_everything"
    with pytest.raises(WireError, match="no member of the union has procedure='drop_everything'"):
        MaintenanceSpec.from_json(json.dumps(payload))
