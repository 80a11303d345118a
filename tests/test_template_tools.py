"""template.yaml passes cfn-lint, `sam validate --lint` and checkov, and `sam build` builds the zip functions.

The SAM CLI and checkov pin their own dependencies (boto3, click), so they live in their own virtualenvs
(`make tool-venvs`: .venv-sam, .venv-checkov, made once by uv from infra/tools/*.txt, then reused).
The three linters run concurrently; `sam build` needs the Lambda runtime's Python (3.12) and PyPI.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.cfn_template import ROOT, functions, load_template, template_resources

# Every test here runs a linter or `sam build` in a process of its own.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
LAMBDA_UNZIPPED_LIMIT = 262_144_000  # bytes: function + layers, unzipped
TOOL_ENV = {
    **os.environ,
    "SAM_CLI_TELEMETRY": "0",
    "AWS_DEFAULT_REGION": "us-east-1",
    # checkov: no calls to Prisma Cloud (guidelines, mappings) from a test.
    "BC_SKIP_MAPPING": "TRUE",
}


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


@dataclass
class ToolRun:
    """One linter started in the background; `finish()` waits for it (or says why it never ran)."""

    process: subprocess.Popen[str] | None = None
    skipped: str = ""
    failed_setup: str = ""
    output: str = field(default="", init=False)

    @classmethod
    def start(cls, command: list[str]) -> ToolRun:
        process = subprocess.Popen(
            command, cwd=ROOT, env=TOOL_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        return cls(process=process)

    def finish(self) -> tuple[int, str]:
        if self.skipped:
            pytest.skip(self.skipped)
        if self.failed_setup:
            pytest.fail(self.failed_setup)
        assert self.process is not None
        if self.process.returncode is None:
            self.output, _ = self.process.communicate(timeout=600)
        return self.process.returncode, self.output


def with_every_resource(template: str) -> str:
    """The template with its resource conditions removed: checkov drops a resource whose condition is
    false for the parameter defaults (the stack-created segment bucket), so it would go unscanned."""
    kept = [line for line in template.splitlines() if not re.fullmatch(r"    Condition: \w+", line)]
    return "\n".join(kept) + "\n"


@pytest.fixture(scope="module")
def linters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ToolRun]]:
    runs = {"cfn-lint": ToolRun.start([str(BIN / "cfn-lint"), "template.yaml"])}
    every_resource = tmp_path_factory.mktemp("checkov") / "template.yaml"
    every_resource.write_text(with_every_resource((ROOT / "template.yaml").read_text()))
    venvs = subprocess.run(
        ["make", "--no-print-directory", "tool-venvs"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if venvs.returncode == 0:
        runs["sam"] = ToolRun.start(
            [".venv-sam/bin/sam", "validate", "--lint", "--template", "template.yaml"]
        )
        runs["checkov"] = ToolRun.start(
            [
                ".venv-checkov/bin/checkov",
                "--file",
                str(every_resource),
                "--framework",
                "cloudformation",
                "--output",
                "json",
                "--skip-download",
            ]
        )
    elif not pypi_reachable():
        reason = "PyPI is unreachable: cannot create the SAM CLI / checkov virtualenvs (make tool-venvs)"
        runs["sam"] = runs["checkov"] = ToolRun(skipped=reason)
    else:
        problem = f"make tool-venvs failed:\n{venvs.stdout}\n{venvs.stderr}"
        runs["sam"] = runs["checkov"] = ToolRun(failed_setup=problem)
    yield runs
    for run in runs.values():
        if run.process is not None and run.process.returncode is None:
            run.process.kill()
            run.process.communicate()


def test_cfn_lint_passes(linters: dict[str, ToolRun]) -> None:
    code, output = linters["cfn-lint"].finish()
    assert code == 0, output


def test_sam_validate_lint_passes(linters: dict[str, ToolRun]) -> None:
    code, output = linters["sam"].finish()
    assert code == 0, output
    assert "is a valid SAM Template" in output


def _checkov_report(output: str) -> dict[str, Any]:
    # Warnings may precede the JSON document.
    report: dict[str, Any] = json.loads(output[output.index("{") :])
    return report


def test_checkov_finds_nothing(linters: dict[str, ToolRun]) -> None:
    """No failed check (open-source checkov has no severities: every failed check is a finding)."""
    code, output = linters["checkov"].finish()
    report = _checkov_report(output)
    failed = [(c["check_id"], c["resource"], c["check_name"]) for c in report["results"]["failed_checks"]]
    assert failed == [], output[-4000:]
    assert code == 0
    checked = report["results"]["passed_checks"] + report["results"]["skipped_checks"]
    scanned = {c["resource"].split(".", 1)[1] for c in checked}
    # It saw the SAM resources and the conditional ones, not only the plain CloudFormation ones.
    expected = {"RouterFunction", "CommitFunction", "RunsBucket", "SegmentBucket", "WorkQueue", "EmrJobRole"}
    assert expected <= scanned
    assert report["summary"]["passed"] > 100
    assert report["summary"]["parsing_errors"] == 0


def test_every_checkov_suppression_is_justified_and_needed(linters: dict[str, ToolRun]) -> None:
    """Each skip says why the check does not apply, and checkov would report it without the skip."""
    skips = {
        (name, skip["id"]): skip.get("comment", "")
        for name, resource in template_resources().items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    }
    assert skips
    for (name, check), comment in skips.items():
        assert len(comment.split()) >= 5, f"{name} {check}: say why it does not apply"
    _, output = linters["checkov"].finish()
    suppressed = _checkov_report(output)["results"]["skipped_checks"]
    assert {(c["resource"].split(".", 1)[1], c["check_id"]) for c in suppressed} == set(skips)


# ---------------------------------------------------------------------------------------------------
# sam build


def lambda_python() -> str | None:
    """A working python3.12 (the functions' runtime): on PATH, or a pyenv installation."""
    candidates = [
        shutil.which("python3.12"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
    ]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"],
            check=False,
            capture_output=True,
        )
        if probe.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def zip_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    python = lambda_python()
    if python is None:
        pytest.skip("no python3.12 (the Lambda runtime) on PATH or under ~/.pyenv: sam build needs it")
    if not (ROOT / ".venv-sam" / "bin" / "sam").exists():
        made = subprocess.run(
            ["make", "--no-print-directory", ".venv-sam/.installed"],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
        if made.returncode != 0:
            if not pypi_reachable():
                pytest.skip("PyPI is unreachable: cannot install the SAM CLI")
            pytest.fail(made.stderr.decode())
    if not pypi_reachable():
        pytest.skip("PyPI is unreachable: sam build downloads the layer's dependencies")
    work = tmp_path_factory.mktemp("sam-build")
    # Image functions need Docker (absent here): build everything else, from the same template.
    template = json.loads(json.dumps(load_template()))
    for function in functions():
        if function.is_image:
            del template["Resources"][function.logical_id]
    (work / "template.json").write_text(json.dumps(template))
    env = {**TOOL_ENV, "PATH": f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}"}
    build = subprocess.run(
        [
            str(ROOT / ".venv-sam" / "bin" / "sam"),
            "build",
            "--template-file",
            str(work / "template.json"),
            "--base-dir",
            str(ROOT),
            "--build-dir",
            str(work / "build"),
            "--parallel",
            "--language-extensions",  # as samconfig.toml: the template's Fn::ForEach
        ],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return work / "build", python


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def test_sam_builds_every_zip_function_within_lambdas_size_limit(zip_build: tuple[Path, str]) -> None:
    build, _ = zip_build
    layer = build / "ControlPlaneDependencies" / "python"
    assert (layer / "pydantic_core").is_dir()
    assert list((layer / "grpc" / "_cython").glob("cygrpc.cpython-312-x86_64-linux-gnu.so"))
    for function in functions():
        if function.is_image:
            continue
        folder = build / function.logical_id
        module = function.handler.rsplit(".", 1)[0]
        assert (folder / (module.replace(".", "/") + ".py")).is_file(), function.logical_id
        assert _size(folder) + _size(layer) < LAMBDA_UNZIPPED_LIMIT * 0.5, function.logical_id


_IMPORT = """
import importlib, sys
sys.path[:0] = sys.argv[1:3]
for name in sys.argv[3:]:
    module, _, attribute = name.rpartition(":")
    loaded = importlib.import_module(module)
    assert not attribute or callable(getattr(loaded, attribute)), name
    heavy = {"pyarrow", "pyiceberg", "pyspark", "numpy"}
    assert not [m for m in sys.modules if m.split(".")[0] in heavy], name
print("imported", len(sys.argv) - 3)
"""


def test_the_built_handlers_import_on_the_lambda_python_with_only_the_built_code(
    zip_build: tuple[Path, str],
) -> None:
    """Python 3.12 without site-packages (-S): only the function folder and the layer are on the path,
    as in Lambda. The adapters loaded lazily (etcd3 + grpc, Secrets Manager) import too."""
    build, python = zip_build
    for function in functions():
        if function.is_image:
            continue
        module, attribute = function.handler.rsplit(".", 1)
        lazily_loaded = [
            "kafscale_iceberg.adapters.etcd_checkpoints:",
            "kafscale_iceberg.adapters.secrets_manager:",
            "kafscale_iceberg.adapters.emr_serverless:",
            "kafscale_iceberg.adapters.step_functions:",
            "kafscale_iceberg.adapters.sqs_queues:",
        ]
        result = subprocess.run(
            [
                python,
                "-S",
                "-c",
                _IMPORT,
                str(build / function.logical_id),
                str(build / "ControlPlaneDependencies" / "python"),
                f"{module}:{attribute}",
                *lazily_loaded,
            ],
            check=False,
            capture_output=True,
            text=True,
            env={"PATH": os.environ["PATH"], "AWS_DEFAULT_REGION": "us-east-1"},
        )
        assert result.returncode == 0, f"{function.logical_id}: {result.stderr[-3000:]}"
