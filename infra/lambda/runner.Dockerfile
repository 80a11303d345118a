# The Lambda runner (template.yaml PlanRunnerFunction, functions/plan_runner.py): a small run's tasks
# in-process, the Spark job's code without a JVM. Its own image, not the commit image: it needs the
# codec (numba, llvmlite, cramjam, crc32c) and no pyiceberg, and it runs on arm64 (every compiled
# wheel it pins exists for aarch64). Build context: the repository root (see .dockerignore). The
# pinned set is infra/lambda/runner/requirements.txt, compiled from pyproject.toml's aws + runner
# extras at the versions the test suite ran (make lambda-requirements).
FROM public.ecr.aws/lambda/python:3.12

COPY infra/lambda/runner/requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --requirement /tmp/requirements.txt --target "${LAMBDA_TASK_ROOT}" \
    && rm /tmp/requirements.txt

COPY kafscale_iceberg ${LAMBDA_TASK_ROOT}/kafscale_iceberg
COPY functions ${LAMBDA_TASK_ROOT}/functions

# No JIT compile on a cold start: numba's cache is filled here by running synthetic JSON, Avro and
# Protobuf plans (kafscale_iceberg/execution/warm_cache.py) and shipped in the image. Compiled for a generic CPU of
# the architecture, so it matches whatever CPU runs the function; read-only at run time is enough.
ENV NUMBA_CACHE_DIR=/opt/numba-cache \
    NUMBA_CPU_NAME=generic
RUN cd "${LAMBDA_TASK_ROOT}" && python -m kafscale_iceberg.execution.warm_cache \
    && test -n "$(find /opt/numba-cache -name '*.nbi')" \
    && chmod -R a+rX /opt/numba-cache

CMD ["functions.plan_runner.handler"]
