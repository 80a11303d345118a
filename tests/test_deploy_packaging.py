"""`make package-spark` builds and uploads exactly what the deployed functions tell EMR Serverless to run.

Building needs Docker, which these machines lack: the commands are checked through `DRY_RUN=1`, which
prints them, against the template's environment and the config's spark-submit parameters.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib

import pytest

from kafscale_iceberg.config import EmrServerlessRunnerConfig
from tests.support.cfn_template import ROOT, Deployment, functions, load_template

DOCKERFILE = ROOT / "infra" / "emr" / "Dockerfile"
PARAMETERS = {
    "ConfigLocation": "s3://kafscale-config/config.yaml",
    "SegmentBucketName": "kafscale-data",
    "SubnetIds": "subnet-0a",
    "SecurityGroupIds": "sg-0c",
    "WarehouseBucket": "kafscale-lake",
    "GlueDatabaseNames": "shop",
}


def package_spark(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-s", "package-spark", "DRY_RUN=1", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def commands(*arguments: str) -> list[list[str]]:
    result = package_spark(*arguments)
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines() if line.strip()]


def option(command: list[str], name: str) -> list[str]:
    return [command[i + 1] for i, word in enumerate(command) if word == name]


def stack_environment(**parameters: str) -> dict[str, str]:
    deployment = Deployment({**PARAMETERS, **parameters})
    start_job = next(f for f in functions() if f.logical_id == "StartJobFunction")
    return deployment.environment(start_job)


def artifacts_uri(**parameters: str) -> str:
    """The stack output `make package-spark` is pointed at (SPARK_ARTIFACTS_URI)."""
    deployment = Deployment({**PARAMETERS, **parameters})
    output = load_template()["Outputs"]["SparkArtifactsUri"]["Value"]
    return str(deployment.evaluate(output))


@pytest.mark.slow  # runs make
def test_the_venv_archive_and_entry_point_go_where_the_functions_point_emr() -> None:
    uri = artifacts_uri()
    build, upload_archive, upload_entry_point = commands(f"SPARK_ARTIFACTS_URI={uri}")
    env = stack_environment()

    assert build[:3] == ["docker", "buildx", "build"]
    assert option(build, "--target") == ["venv-archive"]
    assert option(build, "--output") == ["type=local,dest=build/emr"]
    archive = "build/emr/kafscale-iceberg-venv.tar.gz"
    assert upload_archive == ["aws", "s3", "cp", archive, env["KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE"]]
    assert upload_entry_point == [
        "aws",
        "s3",
        "cp",
        "spark_app/main.py",
        env["KAFSCALE_ICEBERG_EMR_ENTRY_POINT"],
    ]


def test_each_run_unpacks_the_uploaded_archive_as_the_python_the_dockerfile_packs() -> None:
    env = stack_environment()
    settings = EmrServerlessRunnerConfig(venv_archive=env["KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE"])
    parameters = settings.job_spark_submit_parameters()
    assert f"--conf spark.archives={env['KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE']}#environment" in parameters
    assert "PYSPARK_PYTHON=./environment/bin/python" in parameters
    dockerfile = DOCKERFILE.read_text()
    # The archive holds a virtualenv made at /build/environment (so bin/python inside it), packed whole.
    assert "-m venv /build/environment" in dockerfile
    assert "venv-pack --prefix /build/environment" in dockerfile
    assert "--output /output/kafscale-iceberg-venv.tar.gz" in dockerfile
    assert "COPY --from=venv /output/kafscale-iceberg-venv.tar.gz /" in dockerfile


@pytest.mark.slow  # runs make
def test_the_image_is_built_and_pushed_and_the_entry_point_still_uploaded() -> None:
    image = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/kafscale-spark:1"
    uri = artifacts_uri(SparkImageUri=image)
    build, upload_entry_point = commands(
        f"SPARK_ARTIFACTS_URI={uri}", "SPARK_PACKAGING=image", f"SPARK_IMAGE={image}"
    )
    env = stack_environment(SparkImageUri=image)

    assert option(build, "--target") == ["image"]
    assert option(build, "--tag") == [image]
    assert "--push" in build
    assert env["KAFSCALE_ICEBERG_EMR_IMAGE"] == image
    assert "KAFSCALE_ICEBERG_EMR_VENV_ARCHIVE" not in env
    assert upload_entry_point[-1] == env["KAFSCALE_ICEBERG_EMR_ENTRY_POINT"]
    # Nothing is shipped per run: the image's Python already holds the package, and Spark starts it.
    parameters = EmrServerlessRunnerConfig(image=image).job_spark_submit_parameters()
    assert "spark.archives" not in parameters
    assert "spark.executorEnv.PYSPARK_PYTHON=/usr/local/bin/kafscale-python" in parameters
    assert "ENV PYSPARK_PYTHON=/usr/local/bin/kafscale-python" in DOCKERFILE.read_text()
    assert 'ln -sf "$(command -v ${PYTHON})" /usr/local/bin/kafscale-python' in DOCKERFILE.read_text()


@pytest.mark.slow  # runs make
def test_the_build_matches_the_emr_application() -> None:
    """Same release (base image), same architecture, the package's Spark extra without a second PySpark."""
    application = load_template()["Resources"]["EmrApplication"]["Properties"]
    release = load_template()["Parameters"]["EmrReleaseLabel"]["Default"]
    assert release == "emr-spark-8.0.0"
    assert EmrServerlessRunnerConfig().release_label == release
    for build in (
        commands("SPARK_ARTIFACTS_URI=s3://b/spark")[0],
        commands("SPARK_ARTIFACTS_URI=s3://b/spark", "SPARK_PACKAGING=image", "SPARK_IMAGE=r/i:1")[0],
    ):
        assert option(build, "--file") == ["infra/emr/Dockerfile"]
        assert f"EMR_BASE_IMAGE=public.ecr.aws/emr-serverless/spark/{release}:latest" in option(
            build, "--build-arg"
        )
        assert application["Architecture"] == {"Ref": "EmrArchitecture"}
        assert load_template()["Parameters"]["EmrArchitecture"]["Default"] == "ARM64"
        assert option(build, "--platform") == ["linux/arm64"]  # the default EMR_ARCHITECTURE
        assert build[-1] == "."  # the repository root, as .dockerignore expects
    dockerfile = DOCKERFILE.read_text()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("pyspark") for requirement in extras["spark"])
    assert dockerfile.count('".[spark]"') + dockerfile.count('"/build[spark]"') == 2
    assert dockerfile.count("pip uninstall --yes pyspark py4j") == 2
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", dockerfile, flags=re.MULTILINE)
    assert stages == [
        ("${EMR_BASE_IMAGE}", "venv"),
        ("scratch", "venv-archive"),
        ("${EMR_BASE_IMAGE}", "image"),
    ]
    assert f"ARG EMR_BASE_IMAGE=public.ecr.aws/emr-serverless/spark/{release}:latest" in dockerfile


def test_the_docker_context_sends_what_the_emr_dockerfile_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), flags=re.MULTILINE)
    for sources in copied:
        for source in sources.split():
            assert f"!{source}" in ignore or f"!{source}/" in ignore, source


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ((), "set SPARK_ARTIFACTS_URI"),
        (
            ("SPARK_ARTIFACTS_URI=s3://b/spark", "SPARK_PACKAGING=wheel"),
            "SPARK_PACKAGING must be venv or image",
        ),
        (("SPARK_ARTIFACTS_URI=s3://b/spark", "SPARK_PACKAGING=image"), "set SPARK_IMAGE"),
    ],
)
@pytest.mark.slow  # runs make
def test_missing_settings_stop_before_anything_runs(arguments: tuple[str, ...], problem: str) -> None:
    result = package_spark(*arguments)
    assert result.returncode != 0
    assert problem in result.stderr
    assert "docker" not in result.stdout


@pytest.mark.slow  # runs make
@pytest.mark.parametrize("python", ["python3", "python3.9", "python3.14"])
def test_an_interpreter_emr_spark_8_does_not_run_is_refused(python: str) -> None:
    result = package_spark("SPARK_ARTIFACTS_URI=s3://b/spark", f"EMR_PYTHON={python}")
    assert result.returncode != 0
    assert f"EMR_PYTHON={python} does not match emr-spark-8.0.0" in result.stderr
    assert "python3.11 python3.12 python3.13" in result.stderr
    assert "docker" not in result.stdout


@pytest.mark.slow  # runs make
def test_the_environment_is_built_for_a_python_spark_runs_and_checked_in_the_image() -> None:
    for packaging in ((), ("SPARK_PACKAGING=image", "SPARK_IMAGE=r/i:1")):
        build = commands("SPARK_ARTIFACTS_URI=s3://b/spark", *packaging)[0]
        assert "PYTHON=python3.11" in option(build, "--build-arg")
    dockerfile = DOCKERFILE.read_text()
    assert dockerfile.count("emr-spark-8 runs Spark with Python 3.11-3.13") == 2  # both stages check


@pytest.mark.slow  # runs make
def test_an_x86_64_application_gets_an_x86_64_build_and_a_typo_is_refused() -> None:
    build = commands("SPARK_ARTIFACTS_URI=s3://b/spark", "EMR_ARCHITECTURE=x86_64")[0]
    assert option(build, "--platform") == ["linux/amd64"]
    result = package_spark("SPARK_ARTIFACTS_URI=s3://b/spark", "EMR_ARCHITECTURE=amd64")
    assert result.returncode != 0
    assert "EMR_ARCHITECTURE must be arm64 or x86_64" in result.stderr
