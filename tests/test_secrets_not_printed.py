"""Secrets never printed: a token or signature in a spec URL, a password holding `@` and spaces in
`SCORING_WAREHOUSE_URL`, a warehouse held by a process whose command line carries a DSN.

The CLI cases run the real `score` command in a child process against a copy of the demo data,
plant distinct secrets and look for each of them in stdout, stderr and every byte under the data
folder: the run logs, the pending-ledger files and the DuckDB file that holds `runs.error`.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import DEMO_JOB, DemoEnv
from test_operator_faults import copied_demo, jobs_copy, ledger_rows, one_error_line, score

from tasks.errors import ExitCode
from tasks.redaction import is_credential_parameter, redacted_text, redacted_url, scrubbed
from tasks.settings import credential_free_url

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

# One table of URL shapes: what every message shows.
REDACTED = [
    # userinfo passwords, split at the last `@` before the host
    ("postgresql://scorer:s3cret@db.example:5432/warehouse", "postgresql://scorer:***@db.example:5432/warehouse"),
    ("postgresql://postgres:p@ss word@127.0.0.1:5432/db", "postgresql://postgres:***@127.0.0.1:5432/db"),
    ("postgresql://scorer:p@ss:w0rd@db:5432/w?sslmode=require", "postgresql://scorer:***@db:5432/w?sslmode=***"),
    ("postgresql://u:Top@Secret@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
    ("postgresql://[2001:db8::1]:5432/db", "postgresql://[2001:db8::1]:5432/db"),
    ("redis://:onlyapassword@cache:6379/0", "redis://:***@cache:6379/0"),
    # a role without a password is shown; a lone user part elsewhere is a token
    ("postgresql://scorer@db/w", "postgresql://scorer@db/w"),
    ("https://ghp_Token123@github.com/org/repo", "https://***@github.com/org/repo"),
    # ambiguous user parts: nothing between `://` and the last `@` is shown
    ("postgresql://postgres:pa/ss#w?rd@127.0.0.1:5999/db", "postgresql://***@127.0.0.1:5999/db"),
    ("s3://key:se/cret@bucket/prefix/", "s3://***@bucket/prefix/"),
    ("s3://bucket/users/a@b.example/x", "s3://***@b.example/x"),
    # every query value, whatever its name, and the fragment
    ("postgresql://db/w?user=scorer&password=s3cret", "postgresql://db/w?user=***&password=***"),
    ("https://example.com/x/?token=SuperSecret123", "https://example.com/x/?token=***"),
    ("s3://bucket/x/{date}/?sig=S3Sig888", "s3://bucket/x/{date}/?sig=***"),
    ("abfs://container/x/?sv=2022-11-02&se=2026-01-01&sig=AbfsSig777", "abfs://container/x/?sv=***&se=***&sig=***"),
    (
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F2026&X-Amz-Security-Token=T&X-Amz-Signature=abc",
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Security-Token=***&X-Amz-Signature=***",
    ),
    ("gs://bucket/p?X-Goog-Signature=ff00&empty=", "gs://bucket/p?X-Goog-Signature=***&empty="),
    ("s3://lake/tables?aws_secret_access_key=K1&bare", "s3://lake/tables?aws_secret_access_key=***&***"),
    ("https://host/cb#access_token=abc", "https://host/cb#***"),
    # no credential anywhere: shown as written
    ("gs://bucket/raw/{date:%Y/%m/%d}/", "gs://bucket/raw/{date:%Y/%m/%d}/"),
    ("file:///srv/raw/a@b/{date}/", "file:///srv/raw/a@b/{date}/"),
    ("/srv/raw/{date}", "/srv/raw/{date}"),
    ("raw/credit/{date}", "raw/credit/{date}"),
]


@pytest.mark.parametrize(("url", "expected"), REDACTED)
def test_redacted_url_hides_passwords_tokens_and_every_query_value(url: str, expected: str) -> None:
    assert redacted_url(url) == expected


def test_a_driver_quoting_a_piece_of_the_password_is_scrubbed() -> None:
    url = "postgresql://postgres:Hidden@Pass Word77@127.0.0.1:5999/db?password=Other%40Secret9"
    # libpq splits at the first `@`, then quotes the rest as the host name.
    text = scrubbed(
        f'connecting to {url}: unexpected spaces found in "Pass Word77@127.0.0.1"; host "Word77"; Other@Secret9',
        url=url,
    )
    for secret in ("Hidden@Pass Word77", "Pass Word77", "Word77", "Other@Secret9", "Other%40Secret9"):
        assert secret not in text, text
    assert "postgresql://postgres:***@127.0.0.1:5999/db?password=***" in text and '"***@127.0.0.1"' in text


def test_urls_inside_free_text_are_redacted() -> None:
    query = "select * from postgres_scan('postgresql://u:QuerySecret42@db/x', 'public', 'apps')"
    assert redacted_text(query) == "select * from postgres_scan('postgresql://u:***@db/x', 'public', 'apps')"
    # A text that is one URL as a whole keeps a password with spaces hidden.
    assert redacted_text("postgresql://u:a b@c@h/db") == "postgresql://u:***@h/db"


@pytest.mark.parametrize(
    "name",
    [
        "token",
        "sig",
        "Signature",
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "aws_secret_access_key",
        "aws_session_token",
        "access_key",
        "AWSAccessKeyId",
        "secret",
        "password",
        "key",
        "sas",
        "sas_token",
        "code",
        "client_secret",
        "api_key",
        "X-Goog-Signature",
        "account_key",
    ],
)
def test_credential_parameters_are_recognised_and_refused_in_specs(name: str) -> None:
    assert is_credential_parameter(name)
    with pytest.raises(ValueError, match=r"carries credentials") as refused:
        credential_free_url(f"s3://bucket/x/{{date}}/?{name}=Planted77")
    assert "Planted77" not in str(refused.value) and f"{name}=***" in str(refused.value)


@pytest.mark.parametrize("name", ["versionId", "region", "endpoint_override", "sslmode", "date", "scheme"])
def test_options_that_carry_no_credential_are_allowed_in_specs(name: str) -> None:
    assert not is_credential_parameter(name)
    assert credential_free_url(f"s3://bucket/x/{{date}}/?{name}=v") == f"s3://bucket/x/{{date}}/?{name}=v"


# Through the `score` command.


@pytest.fixture
def data(demo_env: DemoEnv, tmp_path: Path) -> Path:
    return copied_demo(demo_env, tmp_path)


def assert_nowhere(secrets: list[str], result: subprocess.CompletedProcess, data_dir: Path) -> None:
    """None of `secrets` in the command's output nor in any byte of any file under the data folder."""
    output = result.stdout + result.stderr
    for secret in secrets:
        assert secret not in output, (secret, output[-3000:])
    files = [p for p in data_dir.rglob("*") if p.is_file()]
    for path in files:
        content = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in content, (secret, path)


SPEC_CASES = {
    "https-token-no-date": (
        ("source", {"parquet": {"url": "https://example.com/x/?token=SuperSecret123"}}),
        "source.parquet.url",
        "'https://example.com/x/?token=***' carries credentials",
        ["SuperSecret123"],
    ),
    "abfs-sig": (
        ("source", {"parquet": {"url": "abfs://container/x/?sv=2022-11-02&sig=AbfsSig777"}}),
        "source.parquet.url",
        "'abfs://container/x/?sv=***&sig=***' carries credentials",
        ["AbfsSig777", "2022-11-02"],
    ),
    "s3-sig": (
        ("source", {"parquet": {"url": "s3://bucket/x/?sig=S3Sig888"}}),
        "source.parquet.url",
        "'s3://bucket/x/?sig=***' carries credentials",
        ["S3Sig888"],
    ),
    "s3-presigned": (
        (
            "source",
            {
                "parquet": {
                    "url": "https://b.s3.amazonaws.com/x/{date}/?X-Amz-Credential=AKIAPLANTED9&X-Amz-Signature=AmzSig555"
                }
            },
        ),
        "source.parquet.url",
        "X-Amz-Credential=***&X-Amz-Signature=***' carries credentials",
        ["AmzSig555", "AKIAPLANTED9"],
    ),
    "password-with-slash": (
        ("source", {"parquet": {"url": "s3://reader:Pa/ss555@bucket/x/{date}/"}}),
        "source.parquet.url",
        "'s3://***@bucket/x/{date}/' carries credentials",
        ["Pa/ss555", "ss555"],
    ),
    "no-date-other-option": (
        ("source", {"parquet": {"url": "https://example.com/x/?versionId=Ver123456"}}),
        "source.parquet.url",
        "'https://example.com/x/?versionId=***' has no {date} placeholder",
        ["Ver123456"],
    ),
    "delta-secret-key": (
        ("sinks", {"delta": {"url": "s3://lake/tables?aws_secret_access_key=DeltaKey999"}}),
        "sinks.delta.url",
        "'s3://lake/tables?aws_secret_access_key=***' carries credentials",
        ["DeltaKey999"],
    ),
    "dsn-in-a-query": (
        (
            "source",
            {
                "sql": {
                    "warehouse": "duckdb",
                    "query": "select * from postgres_scan('postgresql://u:QuerySecret42@db/x', 'public', 'apps')",
                }
            },
        ),
        "source.sql.query",
        "postgres_scan('postgresql://u:***@db/x'",
        ["QuerySecret42"],
    ),
}


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_a_spec_value_with_a_secret_is_one_line_without_it(data: Path, tmp_path: Path, case: str) -> None:
    (key, value), field, shown, secrets = SPEC_CASES[case]
    jobs = jobs_copy(tmp_path, lambda spec: spec.update({key: value}))
    result = score(data, env={"SCORING_JOBS_DIR": str(jobs)})
    line = one_error_line(result, ExitCode.USER)
    assert line.startswith(f"error: {jobs / f'{DEMO_JOB}.yaml'}: {field}: ") and shown in line, line
    assert_nowhere(secrets, result, data)
    assert ledger_rows(data / "warehouse.duckdb") == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("password", "shown", "code", "secrets"),
    [
        # libpq splits at the first `@` and quotes the rest as the host: "Pass Word77@127.0.0.1".
        (
            "Hidden@Pass Word77",
            "postgresql://postgres:***@127.0.0.1:{port}/scoring",
            ExitCode.ENVIRONMENT,
            ["Hidden@Pass Word77", "Pass Word77", "Word77", "Hidden@"],
        ),
        # A parser takes `pa` for the port: refused as no URL, still without its password.
        (
            "Pa/ss#Wo?rd66",
            "postgresql://***@127.0.0.1:{port}/scoring",
            ExitCode.ENVIRONMENT,
            ["Pa/ss#Wo?rd66", "ss#Wo", "rd66", "postgres:Pa"],
        ),
    ],
    ids=["at-and-space", "slash-hash-question"],
)
def test_a_warehouse_url_whose_password_breaks_the_url_is_never_shown(
    data: Path, password: str, shown: str, code: int, secrets: list[str]
) -> None:
    port = _free_port()
    result = score(data, env={"SCORING_WAREHOUSE_URL": f"postgresql://postgres:{password}@127.0.0.1:{port}/scoring"})
    line = one_error_line(result, code)
    assert shown.format(port=port) in line, line
    assert_nowhere(secrets, result, data)


_HOLDER = """
import duckdb, sys, time
# Hold the warehouse as soon as the run has opened its ledger row, so the run fails inside.
while True:
    try:
        con = duckdb.connect(sys.argv[1])
    except duckdb.IOException:
        time.sleep(0.05)
        continue
    try:
        running = con.execute("SELECT count(*) FROM runs WHERE status = 'running'").fetchall()[0][0]
    except duckdb.CatalogException:
        running = 0
    if running:
        print("held", flush=True)
        time.sleep(300)
    con.close()
    time.sleep(0.1)
"""


def test_a_warehouse_held_by_a_process_with_secrets_in_its_command_line_names_only_its_program(data: Path) -> None:
    warehouse = data / "warehouse.duckdb"
    secrets = ["TopSecret99", "PassArg77", "EnvStyle55"]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HOLDER,
            str(warehouse),
            "postgresql://u:TopSecret99@db/x",
            "--password=PassArg77",
            "PASSWORD=EnvStyle55",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        failed = score(data, env={"SCORING_WAREHOUSE_LOCK_WAIT_S": "1"})
    finally:
        holder.kill()
        said, _ = holder.communicate()
    assert said.strip() == "held"
    line = one_error_line(failed, ExitCode.ENVIRONMENT)
    assert f"warehouse {warehouse} is locked by process {holder.pid} (python" in line, line
    # The ledger could not take the failure while the lock was held: the next start records it.
    recovered = score(data, "recover", DEMO_JOB)
    assert recovered.returncode == 0, (recovered.stdout + recovered.stderr)[-3000:]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        ((status, error, detail),) = con.execute("SELECT status, error, error_detail FROM runs").fetchall()
    assert status == "failed" and f"locked by process {holder.pid} (python" in error, error
    assert not any(s in error or s in (detail or "") for s in secrets), (error, detail)
    assert_nowhere(secrets, failed, data)
    assert_nowhere(secrets, recovered, data)
